import { readFileSync } from 'node:fs';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backportChannelType, channelTypeSystem } from '../../../src/channels/registry.ts';
import { loadConfig } from '../../../src/config/index.ts';
import { startWorkers, type Workers } from '../../../src/dispatch/worker.ts';
import { createMetrics } from '../../../src/metrics/metrics.ts';
import { addTopics } from '../../../src/topics/store.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../../support/app.ts';
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

const topicUrl = 'http://example.org/topics/encounter-complete';
const ig = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';

let server: OwnNatsServer;
let stream: TestStream;
let t: TestApp;
let workers: Workers;

beforeAll(async () => {
  server = await startOwnNatsServer();
  stream = await createTestStream(server.url);
  const brokers = JSON.stringify({ own: { type: 'nats-jetstream', url: server.url, subjects: [`${stream.prefix}.>`] } });
  const config = loadConfig({ BROKERS: brokers, BASE_URL: baseUrl, DELIVERY_RESPONSE_TIMEOUT_MS: '1000', RETRY_POLICY_MIN_DELAY_MS: '100' });
  t = await startTestApp({ outbound: { delivery: config.delivery, oauth: undefined, metrics: createMetrics() } });
  await addTopics(t.database.db, [JSON.parse(readFileSync(new URL('../../../examples/topics/encounter-complete.json', import.meta.url), 'utf8'))]);
  workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
});
afterAll(async () => {
  await workers?.stop();
  await t?.close();
  await stream?.close();
  await server?.close();
});

const finishedEncounter = (n: number) => ({
  resourceType: 'Encounter',
  id: `restart-${n}`,
  status: 'finished',
  class: { code: 'AMB' },
  subject: { reference: 'Patient/restart' },
});

describe('a broker that stops mid-stream and starts again', () => {
  it('gets every event once, in number order, with no operator: the failed ones are retried until it is back', { timeout: 60_000 }, async () => {
    const created = await t.fhir('POST', '/Subscription', {
      resourceType: 'Subscription',
      status: 'requested',
      reason: 'broker restart',
      criteria: topicUrl,
      // Patient enough for an outage of several seconds: 18 attempts, 200 ms growing to 1 s.
      extension: [
        {
          url: `${baseUrl}/fhir/resources/StructureDefinition/retry-policy`,
          extension: [
            { url: 'maxAttempts', valuePositiveInt: 18 },
            { url: 'firstDelay', valueDuration: { value: 200, system: 'http://unitsofmeasure.org', code: 'ms' } },
            { url: 'growth', valueDecimal: 1.5 },
            { url: 'maxDelay', valueDuration: { value: 1, system: 'http://unitsofmeasure.org', code: 's' } },
          ],
        },
      ],
      _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: 'Encounter?patient=Patient/restart' }] },
      channel: {
        type: 'message',
        _type: { extension: [{ url: backportChannelType, valueCoding: { system: channelTypeSystem(baseUrl), code: 'nats-jetstream' } }] },
        endpoint: `nats-jetstream://own/${stream.prefix}.encounters`,
        payload: 'application/fhir+json',
        _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'id-only' }] },
      },
    });
    expect(created.statusCode, created.body).toBe(201);
    const { id } = created.json<{ id: string }>();
    await untilStatus(t, id, 'active');

    for (const n of [1, 2, 3, 4, 5]) await t.fhir('PUT', `/Encounter/restart-${n}`, finishedEncounter(n));
    await stream.messages(6);
    await server.stop();
    for (const n of [6, 7, 8, 9, 10]) await t.fhir('PUT', `/Encounter/restart-${n}`, finishedEncounter(n));
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
    expect((await t.database.pool.query<{ status: string }>('SELECT status FROM webhook.subscriptions WHERE id = $1', [id])).rows[0]!.status).toBe('active');
  });
});
