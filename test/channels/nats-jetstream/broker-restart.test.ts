import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestApp } from '../../support/app.ts';
import {
  brokerChannel,
  brokerSubscription,
  currentStatus,
  finishedEncounter,
  retryPolicy,
  startBrokerTestApp,
  subscribed,
  type BrokerTestApp,
} from '../../support/brokers.ts';
import { createTestStream, startOwnNatsServer, type OwnNatsServer, type TestStream } from '../../support/nats.ts';
import { untilStatus } from '../../support/subscriptions.ts';

/**
 * The broker stopped mid-stream and started again (issue 37, item 3): a NATS
 * server of the test's own, its JetStream store on disk, killed while a
 * subscription's events are being written and started again. The events
 * written meanwhile fail, are retried by the subscription's retry policy, and
 * reach the stream once it is back: none lost, none twice, in number order,
 * without an operator.
 */

let server: OwnNatsServer;
let stream: TestStream;
let t: TestApp;
let app: BrokerTestApp;

beforeAll(async () => {
  server = await startOwnNatsServer();
  stream = await createTestStream(server.url);
  app = await startBrokerTestApp(
    { own: { type: 'nats-jetstream', url: server.url, subjects: [`${stream.prefix}.>`] } },
    { DELIVERY_RESPONSE_TIMEOUT_MS: '1000', RETRY_POLICY_MIN_DELAY_MS: '100' },
  );
  t = app.t;
});
afterAll(async () => {
  await app?.close();
  await stream?.close();
  await server?.close();
});

describe('a broker that stops mid-stream and starts again', () => {
  it('gets every event once, in number order, with no operator: the failed ones are retried until it is back', { timeout: 60_000 }, async () => {
    // Patient enough for an outage of several seconds: 18 attempts, 200 ms growing to 1 s.
    const patient = retryPolicy(18, { firstDelayMs: 200, growth: 1.5, maxDelaySeconds: 1 });
    const id = await subscribed(
      t,
      brokerSubscription('restart', brokerChannel('nats-jetstream', `nats-jetstream://own/${stream.prefix}.encounters`), [patient]),
    );
    await untilStatus(t, id, 'active');

    for (const n of [1, 2, 3, 4, 5]) await t.fhir('PUT', `/Encounter/restart-${n}`, finishedEncounter(`restart-${n}`, 'restart'));
    await stream.messages(6);
    await server.stop();
    for (const n of [6, 7, 8, 9, 10]) await t.fhir('PUT', `/Encounter/restart-${n}`, finishedEncounter(`restart-${n}`, 'restart'));
    // Long enough for the events written meanwhile to have failed at least once.
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    const { rows } = await t.database.pool.query<{ failed: number }>(
      `SELECT count(*)::int AS failed FROM webhook.delivery_attempts WHERE subscription_id = $1 AND outcome = 'retrying'`,
      [id],
    );
    expect(rows[0]!.failed).toBeGreaterThan(0);
    await server.start();

    const messages = await stream.messages(11, 30_000);
    expect(messages.slice(1).map((message) => message.header.get('Fhir-Last-Event-Number'))).toEqual(['1', '2', '3', '4', '5', '6', '7', '8', '9', '10']);
    expect(await currentStatus(t, id)).toBe('active');
  });
});
