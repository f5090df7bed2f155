import amqp from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestApp } from '../../support/app.ts';
import {
  brokerChannel,
  brokerSubscription,
  currentStatus,
  finishedEncounter,
  subscribed,
  retryPolicy,
  startBrokerTestApp,
  untilAttempt,
  untilAttempts,
  type BrokerTestApp,
} from '../../support/brokers.ts';
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

const missingExchange = 'fhir-webhooks-test-never-declared';

let t: TestApp;
let app: BrokerTestApp;
let exchange: TestExchange;

beforeAll(async () => {
  exchange = await createTestExchange();
  app = await startBrokerTestApp(
    { integration: { type: 'rabbitmq', url: rabbitUrl, exchanges: [exchange.exchange, missingExchange] } },
    { DELIVERY_RETRY_DELAYS_MS: '100', DELIVERY_RESPONSE_TIMEOUT_MS: '2000' },
  );
  t = app.t;
});
afterAll(async () => {
  await app?.close();
  await exchange?.close();
});

const subscription = (patient: string, endpoint: string, extension: unknown[] = []) =>
  brokerSubscription(patient, brokerChannel('rabbitmq', endpoint), extension);

type Bundle = { entry: { resource: { parameter?: { name: string; valueCode?: string }[] } }[] };
const typeOf = (bundle: Bundle) => bundle.entry[0]!.resource.parameter!.find((item) => item.name === 'type')!.valueCode;

describe('the rabbitmq channel', () => {
  it('publishes the handshake, then each event in number order, confirmed, persistent, with a message id and the subscription in headers', async () => {
    const endpoint = `rabbitmq://integration/${exchange.exchange}/fhir.encounters`;
    const id = await subscribed(t, subscription('rabbit-1', endpoint));
    await untilStatus(t, id, 'active');
    for (const n of [1, 2, 3]) await t.fhir('PUT', `/Encounter/rabbit-${n}`, finishedEncounter(`rabbit-${n}`, 'rabbit-1'));
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
    const attempts = await untilAttempts(t, id, 4);
    expect(attempts.map((attempt) => attempt.outcome)).toEqual(['delivered', 'delivered', 'delivered', 'delivered']);
  });

  it.each([
    ['a routing key no queue is bound for: the message is returned', `rabbitmq://integration/%exchange%/unbound.key`, 'is bound to the exchange'],
    ['an exchange that does not exist', `rabbitmq://integration/${missingExchange}/fhir.x`, `did not confirm the message to the exchange ${missingExchange}`],
  ])('fails the handshake on %s, and says so', async (_what, endpoint, reason) => {
    const id = await subscribed(t, subscription(`rabbit-${reason.length}`, endpoint.replace('%exchange%', exchange.exchange), [retryPolicy(1)]));
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
      const id = await subscribed(t, subscription('rabbit-slow', `rabbitmq://integration/${exchange.exchange}/slow.encounters`, [retryPolicy(10)]));
      await untilStatus(t, id, 'active');
      // The handshake is one of the two the queue holds; four events follow.
      for (const n of [1, 2, 3, 4]) await t.fhir('PUT', `/Encounter/rabbit-slow-${n}`, finishedEncounter(`rabbit-slow-${n}`, 'rabbit-slow'));
      const refused = await untilAttempt(t, id, 'retrying');
      expect(refused.error).toContain('did not confirm the message');
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
      expect(await currentStatus(t, id)).toBe('active');
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
