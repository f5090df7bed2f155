import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { eventNumbers, notificationProblems, type Json } from '../support/backport-conformance.ts';
import { childEnvironment, removeStagedClusters, runCommand, startCommand, stopStartedCommands } from '../support/commands.ts';
import { freePort, waitFor } from '../support/receiver.ts';

/**
 * docs/topics.md's worked example, run as written: its sh blocks in order,
 * with only the ports changed to free ones and the API key and subscription
 * id filled in; what the receiver prints checked as a conformance tester
 * checks a notification.
 */

const page = readFileSync('docs/topics.md', 'utf8');
const example = page.slice(page.indexOf('## A worked example'), page.indexOf('\n## ', page.indexOf('## A worked example') + 1));
const blocks = [...example.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1]!);

const scratch = await mkdtemp(path.join(tmpdir(), 'fhir-webhooks-topics-doc-'));
afterAll(async () => {
  await stopStartedCommands();
  await rm(scratch, { recursive: true, force: true });
  await removeStagedClusters(scratch);
});

describe('docs/topics.md, the worked example', () => {
  it('has the six steps this test knows', () => {
    expect(blocks).toHaveLength(6);
    expect(blocks[0]).toBe('SECRET=change-me node examples/receiver.ts\n');
    expect(blocks[1]).toBe('WEBHOOK_ALLOW_PRIVATE_NETWORKS=true npm start\n');
  });

  it('works as written: three payload levels reach the receiver, conformant, and $status and $events answer', { timeout: 180_000 }, async () => {
    const [servicePort, receiverPort] = [await freePort(), await freePort()];
    const environment = childEnvironment({ PORT: String(servicePort), RECEIVER_PORT: String(receiverPort), EMBEDDED_DATA_DIR: path.join(scratch, 'data') });
    const asWritten = (block: string, fill: { key?: string; id?: string } = {}) =>
      block
        .replaceAll('localhost:8080', `localhost:${servicePort}`)
        .replaceAll('127.0.0.1:9000', `127.0.0.1:${receiverPort}`)
        .replace(/^KEY=fwk_….*$/m, `KEY=${fill.key ?? ''}`)
        .replace(/^ID=….*$/m, `ID=${fill.id ?? ''}`);
    const inThirdTerminal = (block: string, fill: { key: string; id?: string }) =>
      runCommand('bash', ['-e', '-c', asWritten(block, fill)], { ...environment, KEY: fill.key });

    const receiver = startCommand('bash', ['-c', asWritten(blocks[0]!)], environment);
    await receiver.waitFor(/Receiver listening on/);
    const service = startCommand('bash', ['-c', asWritten(blocks[1]!)], environment);
    await service.waitFor(/Listening on/);
    // Its output is a pipe, not a terminal: the first key is in a file, not printed (README.md).
    const key = readFileSync(path.join(scratch, 'data', 'first-api-key'), 'utf8').trim();

    const added = await runCommand('bash', ['-e', '-c', asWritten(blocks[2]!)], environment);
    expect(added.exitCode, added.output).toBe(0);
    expect(added.output).toContain('Added http://example.org/topics/encounter-complete|1.0.0');

    const subscribed = await inThirdTerminal(blocks[3]!, { key: key });
    expect(subscribed.exitCode, subscribed.output).toBe(0);
    const ids = [...subscribed.output.matchAll(/"resourceType":"Subscription","id":"([0-9a-f-]{36})"/g)].map((match) => match[1]!);
    expect(ids, subscribed.output).toHaveLength(3);
    expect(subscribed.output.match(/"status":"requested"/g)).toHaveLength(3);
    await waitFor(
      async () => {
        const response = await fetch(`http://127.0.0.1:${servicePort}/fhir/resources/Subscription?status=active`, { headers: { 'x-api-key': key } });
        return ((await response.json()) as { entry: unknown[] }).entry.length === 3 ? true : undefined;
      },
      20_000,
      'the three subscriptions to become active',
    );

    const written = await inThirdTerminal(blocks[4]!, { key: key });
    expect(written.exitCode, written.output).toBe(0);
    const contents = ['empty', 'id-only', 'full-resource'] as const;
    for (const [index, content] of contents.entries()) {
      // The receiver prints the call's line, its headers, then the body on one line.
      const [, body] = await receiver.waitFor(new RegExp(`POST /${content} \\(signature ok\\)\\n[^{]*(\\{[^\\n]*"event-notification"[^\\n]*\\})\\n`));
      const notification = JSON.parse(body!) as Json;
      expect(notificationProblems(notification, { subscriptionId: ids[index]!, type: 'event-notification', status: 'active', content })).toEqual([]);
      expect(eventNumbers(notification)).toEqual([1]);
      const others = (notification.entry as Json[]).slice(1);
      if (content === 'empty') expect(others).toEqual([]);
      if (content === 'id-only')
        expect(others).toEqual([
          expect.objectContaining({
            fullUrl: `http://localhost:${servicePort}/fhir/resources/Encounter/visit-1`,
            request: { method: 'PUT', url: 'Encounter/visit-1' },
          }),
        ]);
      if (content === 'full-resource') expect(others.map((entry) => entry.resource?.resourceType)).toEqual(['Encounter', 'Patient']);
    }
    // Only the change into finished is an event: one notification each.
    expect(receiver.output().match(/"event-notification"/g)).toHaveLength(3);

    const asked = await inThirdTerminal(blocks[5]!, { key: key, id: ids[2]! });
    expect(asked.exitCode, asked.output).toBe(0);
    const [status, events] = asked.output.split(/(?<=\})(?=\{"resourceType")/).map((text) => JSON.parse(text) as Json);
    expect(status).toMatchObject({ resourceType: 'Bundle', type: 'searchset', total: 3 });
    expect(notificationProblems(events!, { subscriptionId: ids[2]!, type: 'query-event', content: 'full-resource' })).toEqual([]);
    expect(eventNumbers(events!)).toEqual([1]);
  });
});
