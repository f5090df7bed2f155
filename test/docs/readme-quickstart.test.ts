import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { childEnvironment, removeStagedClusters, runCommand, startCommand, stopStartedCommands } from '../support/commands.ts';
import { createTestDatabase } from '../support/database.ts';
import { testSecretsKey } from '../support/app.ts';
import { freePort, waitFor } from '../support/receiver.ts';

/**
 * The README's quick start, run as written: its sh blocks in order, with only
 * the ports changed to free ones and the API key filled in.
 */

const readme = readFileSync('README.md', 'utf8');
const quickStart = readme.slice(readme.indexOf('## Quick start'), readme.indexOf('\n## ', readme.indexOf('## Quick start') + 1));
const blocks = [...quickStart.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1]!);

const scratch = await mkdtemp(path.join(tmpdir(), 'fhir-webhooks-quickstart-'));
const dataDir = path.join(scratch, 'data');
afterAll(async () => {
  await stopStartedCommands();
  await rm(scratch, { recursive: true, force: true });
  await removeStagedClusters(scratch);
});

describe('the README quick start', () => {
  it('has the five steps this test knows', () => {
    expect(blocks).toHaveLength(5);
    expect(blocks[0]).toMatch(/^SECRET=change-me node examples\/receiver\.ts\n$/);
    expect(blocks[1]).toMatch(/^WEBHOOK_ALLOW_PRIVATE_NETWORKS=true npm start\n$/);
  });

  it("docs/delivery.md shows the example receiver's own signature check", () => {
    const snippet = /```ts\n(function isFromTheService[\s\S]*?\n\})/.exec(readFileSync('docs/delivery.md', 'utf8'))?.[1];
    expect(snippet).toBeDefined();
    expect(readFileSync('examples/receiver.ts', 'utf8')).toContain(snippet);
  });

  it('works as written: handshake, a signed notification, and the delivery log', { timeout: 120_000 }, async () => {
    const [servicePort, receiverPort] = [await freePort(), await freePort()];
    const environment = childEnvironment({ PORT: String(servicePort), RECEIVER_PORT: String(receiverPort), EMBEDDED_DATA_DIR: dataDir });
    const asWritten = (block: string, key: string) =>
      block
        .replaceAll('localhost:8080', `localhost:${servicePort}`)
        .replaceAll('127.0.0.1:9000', `127.0.0.1:${receiverPort}`)
        .replace(/^KEY=fwk_….*$/m, `KEY=${key}`);
    // The third terminal's shell keeps KEY from the block that sets it.
    const inThirdTerminal = (block: string, key: string) => runCommand('bash', ['-e', '-c', asWritten(block, key)], { ...environment, KEY: key });

    const receiver = startCommand('bash', ['-c', asWritten(blocks[0]!, '')], environment);
    await receiver.waitFor(/Receiver listening on/);
    const service = startCommand('bash', ['-c', asWritten(blocks[1]!, '')], environment);
    await service.waitFor(/Listening on/);
    // Its output is a pipe, not a terminal: the key is not printed but written where the README says.
    const keyFile = path.join(dataDir, 'first-api-key');
    expect(service.output()).toContain(`wrote it to ${keyFile}`);
    const key = readFileSync(keyFile, 'utf8').trim();

    const created = await inThirdTerminal(blocks[2]!, key);
    expect(created.exitCode, created.output).toBe(0);
    expect(JSON.parse(created.output)).toMatchObject({ resourceType: 'Subscription', status: 'requested' });
    await receiver.waitFor(/"type":"handshake"/);
    expect(receiver.output()).toContain('POST /hooks (signature ok)');
    // The example receiver prints the headers but not the signing key, which one of them carries.
    expect(receiver.output()).toContain('secret: (not shown)');
    expect(receiver.output()).not.toContain('change-me');
    // Until the handshake's answer is recorded the subscription is not active, and a write would not notify.
    await waitFor(
      async () => {
        const response = await fetch(`http://127.0.0.1:${servicePort}/fhir/resources/Subscription?status=active`, { headers: { 'x-api-key': key } });
        return ((await response.json()) as { entry: unknown[] }).entry.length === 1 ? true : undefined;
      },
      10_000,
      'the subscription to become active',
    );

    const written = await inThirdTerminal(blocks[3]!, key);
    expect(written.exitCode, written.output).toBe(0);
    const appointment = JSON.parse(written.output) as { resourceType: string; id: string };
    expect(appointment.resourceType, written.output).toBe('Appointment');
    // The receiver prints the call's line, its headers, then the body: the Appointment.
    const [notification] = await receiver.waitFor(new RegExp(`POST /hooks \\(.*\\)\\n[^{]*\\{[^\\n]*"id":"${appointment.id}"`));
    expect(notification).toContain('POST /hooks (signature ok)');
    expect(notification).toMatch(/x-hub-signature: sha256=[0-9a-f]{64}/);

    // The log's last row, the notification, is recorded right after the receiver answers.
    const log = await waitFor(
      async () => {
        const run = await inThirdTerminal(blocks[4]!, key);
        return /notification \| Appointment/.test(run.output) ? run : undefined;
      },
      20_000,
      'the notification in the delivery log',
    );
    expect(log.exitCode, log.output).toBe(0);
    expect(log.output).toMatch(/handshake\s+\|\s+\|\s+1 \| delivered \|\s+200/);
    expect(log.output).toMatch(/notification \| Appointment\s+\|\s+1 \| delivered \|\s+200/);
    expect(service.output()).not.toContain(key);
  });
});

describe("the README's log file", () => {
  it('of JSON lines only, as the README says to write it: no npm banner', { timeout: 60_000 }, async () => {
    const command = /`(npm start [^`]*> log\.txt)`/.exec(readme)?.[1];
    expect(command, 'the README says how to write the log to a file').toBeDefined();
    const database = await createTestDatabase();
    const logFile = path.join(scratch, 'log.txt');
    const port = await freePort();
    const environment = childEnvironment({
      DATABASE_URL: database.url,
      SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'),
      BOOTSTRAP_API_KEY: 'readme-log-file-key-0123456789',
      PORT: String(port),
    });
    try {
      const service = startCommand('bash', ['-c', command!.replace('log.txt', logFile)], environment);
      await waitFor(
        async () => (existsSync(logFile) && readFileSync(logFile, 'utf8').includes('Listening on') ? true : undefined),
        30_000,
        'the service listening',
      );
      service.interrupt('SIGINT');
      expect(await service.exited).toBe(0);
      const lines = readFileSync(logFile, 'utf8').trimEnd().split('\n');
      expect(lines.length).toBeGreaterThan(2);
      for (const line of lines) expect(() => JSON.parse(line), line).not.toThrow();
      expect(JSON.parse(lines.at(-1)!)).toMatchObject({ msg: 'stopped' });
    } finally {
      await database.drop();
    }
  });
});
