import amqp, { type Channel, type ChannelModel } from 'amqplib';
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
import { startOwnRabbitMq, type OwnRabbitMq } from '../../support/rabbitmq.ts';
import { waitFor } from '../../support/receiver.ts';
import { untilStatus } from '../../support/subscriptions.ts';

/**
 * RabbitMQ stopped mid-stream and started again (issue 37, item 3): a node of
 * the test's own, killed while a subscription's events are being written, and
 * started again on the same data. The events written meanwhile fail, are
 * retried by the subscription's retry policy, and reach the durable queue once
 * the node is back: none lost, in number order (a redelivery, if any, with the
 * message id of the first), without an operator.
 */

const exchange = 'fhir-webhooks-restart';
const queue = 'fhir-webhooks-restart';

let node: OwnRabbitMq;
let t: TestApp;
let app: BrokerTestApp;

beforeAll(async () => {
  node = await startOwnRabbitMq();
  // Durable, so that the queue and its messages outlive the node's restart.
  await withChannel(async (channel) => {
    await channel.assertExchange(exchange, 'topic', { durable: true });
    await channel.assertQueue(queue, { durable: true });
    await channel.bindQueue(queue, exchange, 'fhir.#');
  });
  app = await startBrokerTestApp(
    { own: { type: 'rabbitmq', url: node.url, exchanges: [exchange] } },
    { DELIVERY_RESPONSE_TIMEOUT_MS: '2000', RETRY_POLICY_MIN_DELAY_MS: '100' },
  );
  t = app.t;
}, 90_000);
afterAll(async () => {
  await app?.close();
  await node?.close();
});

async function withChannel<T>(body: (channel: Channel) => Promise<T>): Promise<T> {
  const connection: ChannelModel = await amqp.connect(node.url);
  try {
    return await body(await connection.createChannel());
  } finally {
    await connection.close().catch(() => undefined);
  }
}

const queued = () => withChannel(async (channel) => (await channel.checkQueue(queue)).messageCount).catch(() => -1);

describe('a RabbitMQ node that stops mid-stream and starts again', () => {
  it('gets every event, in number order, with no operator: the failed ones are retried until it is back', { timeout: 180_000 }, async () => {
    // Patient enough for a node that boots slowly on a busy machine (a minute and more): 18 attempts, 200 ms growing to 5 s.
    const patient = retryPolicy(18, { firstDelayMs: 200, growth: 1.5, maxDelaySeconds: 5 });
    const id = await subscribed(t, brokerSubscription('rabbit-restart', brokerChannel('rabbitmq', `rabbitmq://own/${exchange}/fhir.encounters`), [patient]));
    await untilStatus(t, id, 'active');

    for (const n of [1, 2, 3, 4, 5]) await t.fhir('PUT', `/Encounter/rabbit-restart-${n}`, finishedEncounter(`rabbit-restart-${n}`, 'rabbit-restart'));
    const delivered = async () =>
      (
        await t.database.pool.query<{ delivered: number }>(
          `SELECT count(*)::int AS delivered FROM webhook.delivery_attempts WHERE subscription_id = $1 AND outcome = 'delivered'`,
          [id],
        )
      ).rows[0]!.delivered;
    // The handshake and five events confirmed (and recorded) before the node dies.
    await waitFor(async () => ((await delivered()) >= 6 ? true : undefined), 15_000, 'six confirmed');
    await node.stop();
    for (const n of [6, 7, 8, 9, 10]) await t.fhir('PUT', `/Encounter/rabbit-restart-${n}`, finishedEncounter(`rabbit-restart-${n}`, 'rabbit-restart'));
    await waitFor(
      async () => {
        const { rows } = await t.database.pool.query<{ retrying: number }>(
          `SELECT count(*)::int AS retrying FROM webhook.delivery_attempts WHERE subscription_id = $1 AND outcome = 'retrying'`,
          [id],
        );
        return rows[0]!.retrying > 0 ? true : undefined;
      },
      15_000,
      'a failed publish while the node is down',
    );
    await node.start();

    await waitFor(async () => ((await queued()) >= 11 ? true : undefined), 60_000, 'eleven messages in the queue');
    const messages = await withChannel(async (channel) => {
      const read: { messageId: string; eventNumber: number }[] = [];
      for (let message = await channel.get(queue, { noAck: true }); message !== false; message = await channel.get(queue, { noAck: true })) {
        read.push({ messageId: String(message.properties.messageId), eventNumber: Number(message.properties.headers?.['Fhir-Last-Event-Number'] ?? 0) });
      }
      return read;
    });
    // At least once: a message the node stored before a confirm it never sent may come twice, with its own id.
    const once = messages.filter((message, index) => messages.findIndex((other) => other.messageId === message.messageId) === index);
    expect(once.map((message) => message.eventNumber)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(await currentStatus(t, id)).toBe('active');
  });
});
