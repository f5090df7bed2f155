import { readFileSync } from 'node:fs';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { startService, type Service } from '../../src/service.ts';
import { testSecretsKey } from '../support/app.ts';
import { childEnvironment, runCommand } from '../support/commands.ts';
import { createTestDatabase } from '../support/database.ts';
import { freePort } from '../support/receiver.ts';

/**
 * docs/subscriptions.md's example, run as written after the README quick
 * start's subscription was created: with only the port changed, the API key
 * filled in, and the identifier and id it makes. Its switch-offs end its own
 * subscriptions, never the quick start's.
 */

const sections = (text: string, heading: string) => {
  const from = text.indexOf(heading);
  return [...text.slice(from, text.indexOf('\n## ', from + 1)).matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1]!);
};
const [example] = sections(readFileSync('docs/subscriptions.md', 'utf8'), '# Subscriptions');
const quickStartCreate = sections(readFileSync('README.md', 'utf8'), '## Quick start')[2]!;

const apiKey = 'subscriptions-doc-key-0123456789';
const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** The JSON values curl printed one after the other, without newlines between them. */
function jsonValues(text: string): Record<string, unknown>[] {
  const values: Record<string, unknown>[] = [];
  let start = 0;
  for (let end = text.indexOf('}'); end !== -1; end = text.indexOf('}', end + 1)) {
    try {
      values.push(JSON.parse(text.slice(start, end + 1)) as Record<string, unknown>);
      start = end + 1;
    } catch {
      // Not the end of a value yet.
    }
  }
  expect(text.slice(start).trim()).toBe('');
  return values;
}

type Subscription = { id: string; status: string; criteria: string; meta: { tag: { code: string }[] } };

describe("docs/subscriptions.md's example", () => {
  it("creates, finds, reads, replaces and switches off its own subscription, leaving the quick start's live", { timeout: 60_000 }, async () => {
    const database = await createTestDatabase();
    cleanups.push(() => database.drop());
    const port = await freePort();
    // The API alone: the examples' receivers are not real, and no handshake is needed to switch off.
    const service: Service = await startService(
      loadConfig({ DATABASE_URL: database.url, PORT: String(port), BOOTSTRAP_API_KEY: apiKey, SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64') }),
      pino({ level: 'silent' }),
      { api: true, workers: false },
    );
    cleanups.push(() => service.close());
    const asWritten = (block: string, fill: Record<string, string> = {}) =>
      Object.entries(fill).reduce(
        (text, [placeholder, value]) => text.replaceAll(placeholder, value),
        block
          .replaceAll('localhost:8080', `localhost:${port}`)
          .replaceAll('localhost%3A8080', `localhost%3A${port}`)
          .replace(/^KEY=(fwk_)?….*$/m, `KEY=${apiKey}`),
      );
    const run = async (block: string) => {
      const finished = await runCommand('bash', ['-e', '-c', block], childEnvironment({ KEY: apiKey }));
      expect(finished.exitCode, finished.output).toBe(0);
      return finished.output;
    };

    const quickStart = JSON.parse(await run(asWritten(quickStartCreate))) as Subscription;
    expect(quickStart).toMatchObject({ status: 'requested', criteria: 'Appointment?status=booked' });

    // The create, then the rest with what it made filled in.
    const at = example!.indexOf('# Find it');
    const created = JSON.parse(await run(asWritten(example!.slice(0, at)))) as Subscription;
    expect(created).toMatchObject({ resourceType: 'Subscription', status: 'requested' });
    const output = await run(asWritten(example!.slice(at), { '<identifier>': created.meta.tag[0]!.code, '<id>': created.id }));
    const { rows } = await database.pool.query<{ id: string; status: string }>('SELECT id, status FROM webhook.subscriptions ORDER BY created_at');
    expect(
      rows.find((row) => row.id === quickStart.id),
      "the quick start's subscription",
    ).toEqual({ id: quickStart.id, status: 'requested' });
    expect(rows.map((row) => row.status)).toEqual(['requested', 'off', 'off']);

    const answers = jsonValues(output);
    // Three searches, the read's envelope (no resourceType), the transaction's answer, the switch-off's.
    expect(
      answers.map((answer) => answer.resourceType),
      output,
    ).toEqual(['Bundle', 'Bundle', 'Bundle', undefined, 'Bundle', 'Subscription']);
    expect(answers[3]).toMatchObject({ resource: { id: created.id }, search: { mode: 'match' } });
    // Found by its tag and by its criteria; the replacement's entries both succeeded.
    expect(answers[0]).toMatchObject({ entry: [{ resource: { id: created.id } }] });
    expect(answers[1]).toMatchObject({ entry: [{ resource: { id: created.id } }] });
    expect(answers[4]).toMatchObject({ type: 'transaction-response', entry: [{ response: { status: '200 OK' } }, { response: { status: '201 Created' } }] });
    expect(answers[5]).toMatchObject({ status: 'off' });
  });
});
