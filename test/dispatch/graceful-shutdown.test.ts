import { createServer, type ServerResponse } from 'node:http';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers } from '../../src/dispatch/worker.ts';
import { baseUrl, startTestApp, testSecretsKey } from '../support/app.ts';
import { closedAtFileEnd } from '../support/dispatch-stack.ts';
import { waitFor } from '../support/receiver.ts';
import { attemptsOf, statusOf, subscribe, untilStatus } from '../support/subscriptions.ts';

const { closeAtEnd, listen } = closedAtFileEnd();

describe('graceful shutdown', () => {
  it("cuts a call that outlasts graphile-worker's 5 s of patience short, records nothing, and enqueues the event again", { timeout: 60_000 }, async () => {
    const t = await startTestApp();
    closeAtEnd(() => t.close());
    const config = loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
    // Answers the handshake, then holds every notification without answering.
    const held: ServerResponse[] = [];
    const server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        if ((JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceType: string }).resourceType === 'Bundle') response.writeHead(200).end();
        else held.push(response);
      });
    });
    const endpointUrl = `http://127.0.0.1:${await listen(server)}/hook`;
    const workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
    const { id } = await subscribe(t, 'Encounter?status=cancelled', endpointUrl);
    await untilStatus(t, id, 'active');
    await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'cancelled', class: { code: 'AMB' } });
    await waitFor(() => (held.length === 1 ? true : undefined), 10_000, 'the notification to be held');

    const stopping = performance.now();
    await workers.stop();
    const stoppedAfterMs = performance.now() - stopping;
    // graphile-worker's abort timeout (5 s) and some slack; without the abort the call would run to its 15 s timeout.
    expect(stoppedAfterMs).toBeLessThan(12_000);
    expect((await attemptsOf(t, id)).filter((row) => row.kind === 'notification')).toEqual([]);
    // The event cut short is not recorded: it stays pending, numbered, for this worker after its restart or another.
    const { rows } = await t.database.pool.query(
      `SELECT event.resource_type, event.version_id, event.event_number, event.attempts, event.not_before, event.status,
              (SELECT claim.claimed_by FROM webhook.subscription_claims claim WHERE claim.subscription_id = event.subscription_id) AS claimed_by
       FROM webhook.subscription_events event
       WHERE event.subscription_id = $1`,
      [id],
    );
    expect(rows).toEqual([
      { resource_type: 'Encounter', version_id: 1, event_number: '1', attempts: 0, not_before: null, status: 'pending', claimed_by: null },
    ]);
    expect(await statusOf(t, id)).toMatchObject({ status: 'active', failure_count: 0 });
    for (const response of held) response.destroy();
  });
});
