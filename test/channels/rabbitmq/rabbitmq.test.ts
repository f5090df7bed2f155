import { readFileSync } from 'node:fs';
import amqp from 'amqplib';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backportChannelType, channelTypeSystem } from '../../../src/channels/registry.ts';
import { loadConfig } from '../../../src/config/index.ts';
import { startWorkers, type Workers } from '../../../src/dispatch/worker.ts';
import { createMetrics } from '../../../src/metrics/metrics.ts';
import { addTopics } from '../../../src/topics/store.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../../support/app.ts';
import { createTestExchange, rabbitUrl, type TestExchange } from '../../support/rabbitmq.ts';
import { waitFor } from '../../support/receiver.ts';
import { attemptsOf, untilStatus } from '../../support/subscriptions.ts';

/**
 * The RabbitMQ channel end to end (src/channels/rabbitmq/): a topic-based
 * subscription made through the API names one of the operator's brokers, an
 * exchange it allows and a routing key; its handshake and notifications are
 * published to a real exchange on the machine's RabbitMQ, confirmed, into the
 * queue bound there in event-number order; an unroutable message or an
 * exchange that does not exist is a failure that says why.
 */

const topicUrl = 'http://example.org/topics/encounter-complete';
const ig = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';
const missingExchange = 'fhir-webhooks-test-never-declared';

let t: TestApp;
let workers: Workers;
let exchange: TestExchange;

beforeAll(async () => {
  exchange = await createTestExchange();
  const brokers = JSON.stringify({ integration: { type: 'rabbitmq', url: rabbitUrl, exchanges: [exchange.exchange, missingExchange] } });
  const config = loadConfig({ BROKERS: brokers, BASE_URL: baseUrl, DELIVERY_RETRY_DELAYS_MS: '100', DELIVERY_RESPONSE_TIMEOUT_MS: '2000' });
  t = await startTestApp({ outbound: { delivery: config.delivery, oauth: undefined, metrics: createMetrics() } });
  await addTopics(t.database.db, [JSON.parse(readFileSync(new URL('../../../examples/topics/encounter-complete.json', import.meta.url), 'utf8'))]);
  workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
});
afterAll(async () => {
  await workers?.stop();
  await t?.close();
  await exchange?.close();
});

const rabbitChannel = (endpoint: string) => ({
  type: 'message',
  _type: { extension: [{ url: backportChannelType, valueCoding: { system: channelTypeSystem(baseUrl), code: 'rabbitmq' } }] },
  endpoint,
  payload: 'application/fhir+json',
  _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'id-only' }] },
});

const onceOnly = { url: `${baseUrl}/fhir/resources/StructureDefinition/retry-policy`, extension: [{ url: 'maxAttempts', valuePositiveInt: 1 }] };

const subscription = (patient: string, endpoint: string, extension: unknown[] = []) => ({
  resourceType: 'Subscription',
  status: 'requested',
  reason: 'the RabbitMQ channel',
  criteria: topicUrl,
  ...(extension.length === 0 ? {} : { extension }),
  _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: `Encounter?patient=Patient/${patient}` }] },
  channel: rabbitChannel(endpoint),
});

type Bundle = { entry: { resource: { parameter?: { name: string; valueCode?: string }[] } }[] };
const typeOf = (bundle: Bundle) => bundle.entry[0]!.resource.parameter!.find((item) => item.name === 'type')!.valueCode;

describe('the rabbitmq channel', () => {
  it('publishes the handshake, then each event in number order, confirmed, persistent, with a message id and the subscription in headers', async () => {
    const endpoint = `rabbitmq://integration/${exchange.exchange}/fhir.encounters`;
    const created = await t.fhir('POST', '/Subscription', subscription('rabbit-1', endpoint));
    expect(created.statusCode, created.body).toBe(201);
    const { id } = created.json<{ id: string }>();
    await untilStatus(t, id, 'active');
    for (const n of [1, 2, 3]) {
      await t.fhir('PUT', `/Encounter/rabbit-${n}`, {
        resourceType: 'Encounter',
        id: `rabbit-${n}`,
        status: 'finished',
        class: { code: 'AMB' },
        subject: { reference: 'Patient/rabbit-1' },
      });
    }
    const messages = await exchange.messages(4);
    expect(messages.map((message) => typeOf(JSON.parse(message.content.toString('utf8')) as Bundle))).toEqual([
      'handshake',
      'event-notification',
      'event-notification',
      'event-notification',
    ]);
    expect(messages.slice(1).map((message) => message.properties.headers?.['Fhir-Last-Event-Number'])).toEqual([1, 2, 3]);
    expect(messages.every((message) => message.properties.headers?.['Fhir-Subscription'] === id)).toBe(true);
    expect(messages.every((message) => message.properties.deliveryMode === 2 && message.properties.contentType === 'application/fhir+json')).toBe(true);
    const messageIds = messages.map((message) => String(message.properties.messageId));
    expect(new Set(messageIds).size).toBe(4);
    expect(messageIds.every((messageId) => messageId.startsWith(`${id}:`))).toBe(true);
    // Recorded a moment after the broker confirmed the last one.
    const attempts = await waitFor(
      async () => {
        const recorded = await attemptsOf(t, id);
        return recorded.length >= 4 ? recorded : undefined;
      },
      10_000,
      'four attempts recorded',
    );
    expect(attempts.map((attempt) => attempt.outcome)).toEqual(['delivered', 'delivered', 'delivered', 'delivered']);
  });

  it.each([
    ['a routing key no queue is bound for: the message is returned', `rabbitmq://integration/%exchange%/unbound.key`, 'is bound to the exchange'],
    ['an exchange that does not exist', `rabbitmq://integration/${missingExchange}/fhir.x`, `did not confirm the message to the exchange ${missingExchange}`],
  ])('fails the handshake on %s, and says so', async (_what, endpoint, reason) => {
    const created = await t.fhir(
      'POST',
      '/Subscription',
      subscription(`rabbit-${reason.length}`, endpoint.replace('%exchange%', exchange.exchange), [onceOnly]),
    );
    expect(created.statusCode, created.body).toBe(201);
    const { id } = created.json<{ id: string }>();
    await untilStatus(t, id, 'error');
    const [handshake] = await attemptsOf(t, id);
    expect(handshake).toMatchObject({ kind: 'handshake', outcome: 'failed' });
    expect(handshake!.error).toContain(reason);
  });

  it('waits out a slow consumer: a full queue refuses the publish (a negative confirm), which is retried until the consumer has read, none lost, in order', async () => {
    // A queue of two messages at most that refuses more (reject-publish): the broker nacks the confirm of a third.
    const connection = await amqp.connect(rabbitUrl);
    const channel = await connection.createChannel();
    const { queue } = await channel.assertQueue('', { exclusive: true, arguments: { 'x-max-length': 2, 'x-overflow': 'reject-publish' } });
    await channel.bindQueue(queue, exchange.exchange, 'slow.encounters');
    try {
      // Patient enough for a consumer that reads a few seconds late.
      const patient = { url: `${baseUrl}/fhir/resources/StructureDefinition/retry-policy`, extension: [{ url: 'maxAttempts', valuePositiveInt: 10 }] };
      const created = await t.fhir(
        'POST',
        '/Subscription',
        subscription('rabbit-slow', `rabbitmq://integration/${exchange.exchange}/slow.encounters`, [patient]),
      );
      expect(created.statusCode, created.body).toBe(201);
      const { id } = created.json<{ id: string }>();
      await untilStatus(t, id, 'active');
      // The handshake is one of the two the queue holds; four events follow.
      for (const n of [1, 2, 3, 4]) {
        await t.fhir('PUT', `/Encounter/rabbit-slow-${n}`, {
          resourceType: 'Encounter',
          id: `rabbit-slow-${n}`,
          status: 'finished',
          class: { code: 'AMB' },
          subject: { reference: 'Patient/rabbit-slow' },
        });
      }
      await waitFor(async () => ((await attemptsOf(t, id)).some((attempt) => attempt.outcome === 'retrying') ? true : undefined), 10_000, 'a refused publish');
      // The consumer reads at last, one message at a time, until it has the handshake and the four events.
      const received: number[] = [];
      await waitFor(
        async () => {
          const message = await channel.get(queue, { noAck: true });
          if (message !== false) received.push(Number(message.properties.headers?.['Fhir-Last-Event-Number'] ?? 0));
          return received.length >= 5 ? true : undefined;
        },
        15_000,
        'the handshake and four events',
      );
      expect(received).toEqual([0, 1, 2, 3, 4]);
      expect((await t.database.pool.query<{ status: string }>('SELECT status FROM webhook.subscriptions WHERE id = $1', [id])).rows[0]!.status).toBe('active');
    } finally {
      await connection.close();
    }
  });

  it.each([
    [
      'a broker the operator does not have',
      'rabbitmq://other/fhir/fhir.x',
      'names the broker other, which this service does not have as a RabbitMQ broker (it has integration)',
    ],
    [
      'an exchange the operator does not allow',
      'rabbitmq://integration/amq.topic/fhir.x',
      'exchange amq.topic is not one the broker integration takes from subscriptions',
    ],
    ['a host in place of a broker', 'amqp://guest:guest@127.0.0.1:5672/fhir', 'channel.endpoint must be rabbitmq://<broker>/<exchange>/<routing key>'],
  ])('refuses %s with a 400 naming it', async (_what, endpoint, message) => {
    const response = await t.fhir('POST', '/Subscription', subscription('rabbit-refused', endpoint));
    expect(response.statusCode).toBe(400);
    expect(response.json<{ issue: { details: { text: string } }[] }>().issue[0]!.details.text).toContain(message);
  });
});
