import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import amqp, { type ConsumeMessage } from 'amqplib';
import pg from 'pg';
import type { Brokers } from '../../../src/config/brokers.ts';
import { wallNow } from '../../support/bench-receiver.ts';
import { until } from '../../support/waiting.ts';
import type { BenchReceiver } from '../../support/bench-receiver.ts';
import { withDispatcher, type Bench } from '../harness/dispatcher.ts';
import { addExampleTopic } from '../harness/deliveries.ts';
import type { Row } from '../harness/table.ts';

/** The brokers every machine of this project runs: NATS with JetStream and RabbitMQ (guest/guest). */
const natsUrl = process.env.BENCH_NATS_URL ?? 'nats://127.0.0.1:4222';
const rabbitUrl = process.env.BENCH_RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

/**
 * Notifications into a broker (issue 37, item 5): events/s from ONE
 * statement writing `events` finished Encounters, matching one topic-based
 * subscription on the example topic with the broker's channel, from the
 * statement's commit to the last message a consumer receives; against the
 * same broker's raw rate in the same run, a bare client publishing as many
 * messages of the same size one at a time, each acknowledged (JetStream's
 * publish acknowledgement; RabbitMQ's publisher confirm), as the channel
 * does for a topic-based subscription. Every message is checked received once
 * and in event-number order.
 */
export async function brokerRows(url: string, receiver: BenchReceiver, events: number): Promise<Row[]> {
  return [await brokerRow(url, receiver, events, await natsUnderTest(events)), await brokerRow(url, receiver, events, await rabbitUnderTest(events))];
}

/** A broker as a row measures it: what it is to the service, the bare client's rate, and a consumer of the subscription's messages. */
type BrokerUnderTest = {
  channelType: 'nats-jetstream' | 'rabbitmq';
  /** Its entry in BROKERS, as `bench`. */
  broker: Brokers[string];
  /** The subscription's destination on `bench`. */
  endpoint: string;
  /** The bare client's acknowledged publishes a second, measured as it was set up. */
  rawPerSecond: number;
  /** Starts reading the subscription's messages, telling each one's event number; resolves to what stops the reading. */
  consume(received: (eventNumber: number) => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
};

/** A notification's size, as the bare client publishes it. */
const rawBody = JSON.stringify({ resourceType: 'Bundle', padding: 'x'.repeat(700) });

/** The row of one broker: from the statement's commit to the last message the consumer received, and what it received. */
async function brokerRow(url: string, receiver: BenchReceiver, events: number, underTest: BrokerUnderTest): Promise<Row> {
  const { channelType, rawPerSecond } = underTest;
  try {
    return await withDispatcher(
      url,
      receiver,
      async (bench) => {
        const topicUrl = await addExampleTopic(bench);
        const writer = new pg.Client({ connectionString: url });
        await writer.connect();
        try {
          const id = await brokerSubscription(bench, writer, topicUrl, channelType, underTest.endpoint);
          const eventNumbers: number[] = [];
          let lastAt = 0;
          const stop = await underTest.consume((eventNumber) => {
            eventNumbers.push(eventNumber);
            lastAt = wallNow();
          });
          const committedAt = await writeFinished(writer, `bench-${channelType}-`, `Patient/bench-${channelType}`, events);
          await until(async () => eventNumbers.length >= events, 120_000, 'every message');
          // Any message beyond them (a duplicate) would come now, and show in the checks.
          await sleep(300);
          await stop();
          await switchOff(writer, id);
          const inOrder = eventNumbers.every((number, index) => number === index + 1);
          const perSecond = events / ((lastAt - committedAt) / 1000);
          return {
            row: `${channelType}: one topic subscription, ${events.toLocaleString('en')} events of one statement into the broker, received in order (raw: a bare client, each acknowledged, ${Math.round(rawPerSecond).toLocaleString('en')} msgs/s)`,
            figure: perSecond,
            unit: 'events/s',
            ratioToCeiling: perSecond / rawPerSecond,
            checks: `${eventNumbers.length} received, ${new Set(eventNumbers).size} distinct, ${inOrder ? 'in order' : 'OUT OF ORDER'}`,
          };
        } finally {
          await writer.end();
        }
      },
      'worker',
      { BROKERS: JSON.stringify({ bench: underTest.broker }) },
    );
  } finally {
    await underTest.close();
  }
}

/**
 * One active topic-based subscription with a broker channel, as after its
 * handshake, without filters: the row switches it off when done, so that the
 * next row's writes are not its.
 */
async function brokerSubscription(bench: Bench, client: pg.Client, topicUrl: string, channelType: string, endpoint: string): Promise<string> {
  const { box } = bench.context;
  const { rows } = await client.query<{ id: string }>(
    `INSERT INTO webhook.subscriptions (status, criteria, topic_id, topic_filter, filter_criteria, payload_content, compiled_criteria,
                                        channel_type, endpoint, headers_encrypted, signing_secret_encrypted, secret_is_generated, reason)
     SELECT 'active', url, id, '{}', '{}', 'id-only', '{}', $1, $2, $4, $5, true, 'bench'
     FROM webhook.subscription_topics WHERE url = $3
     RETURNING id`,
    [channelType, endpoint, topicUrl, box.seal(JSON.stringify([])), box.seal('bench-secret')],
  );
  return rows[0]!.id;
}

const switchOff = (client: pg.Client, id: string) => client.query(`UPDATE webhook.subscriptions SET status = 'off', ended_at = now() WHERE id = $1`, [id]);

/** Writes `events` finished Encounters of `patient` in one statement; the instant of its commit. */
async function writeFinished(client: pg.Client, prefix: string, patient: string, events: number): Promise<number> {
  await client.query(
    `INSERT INTO fhir.resources (content)
     SELECT jsonb_build_object('resourceType', 'Encounter', 'id', $1 || n, 'status', 'finished', 'class', jsonb_build_object('code', 'AMB'),
                               'subject', jsonb_build_object('reference', $2::text))
     FROM generate_series(1, $3::int) n`,
    [prefix, patient, events],
  );
  return wallNow();
}

/** The machine's NATS: a stream for the subscription's messages, read by an ordered consumer, and one for the bare client's. */
async function natsUnderTest(events: number): Promise<BrokerUnderTest> {
  const connection = await connect({ servers: natsUrl });
  const manager = await jetstreamManager(connection);
  const name = `fhir_webhooks_bench_${randomUUID().replaceAll('-', '')}`;
  const prefix = name.replaceAll('_', '-');
  // Two streams, as the ordered consumer reads the subscription's whole (a consumer's filter_subjects needs NATS 2.10; this machine runs 2.9).
  await manager.streams.add({ name, subjects: [`${prefix}.>`] });
  await manager.streams.add({ name: `${name}_raw`, subjects: [`${prefix}-raw.>`] });
  const client = jetstream(connection);
  const rawStarted = wallNow();
  for (let n = 0; n < events; n++) await client.publish(`${prefix}-raw.messages`, rawBody, { msgID: `raw-${n}` });
  return {
    channelType: 'nats-jetstream',
    broker: { type: 'nats-jetstream', url: natsUrl, subjects: [`${prefix}.>`] },
    endpoint: `nats-jetstream://bench/${prefix}.events`,
    rawPerSecond: events / ((wallNow() - rawStarted) / 1000),
    consume: async (received) => {
      const messages = await (await client.consumers.get(name)).consume();
      const reading = (async () => {
        for await (const message of messages) received(Number(message.headers?.get('Fhir-Last-Event-Number')));
      })();
      return async () => {
        await messages.close();
        await reading;
      };
    },
    close: async () => {
      await manager.streams.delete(name).catch(() => undefined);
      await manager.streams.delete(`${name}_raw`).catch(() => undefined);
      await connection.close();
    },
  };
}

/** The machine's RabbitMQ: an exchange of its own, a queue for the subscription's messages and one for the bare client's. */
async function rabbitUnderTest(events: number): Promise<BrokerUnderTest> {
  const connection = await amqp.connect(rabbitUrl);
  const channel = await connection.createConfirmChannel();
  const exchange = `fhir-webhooks-bench-${randomUUID()}`;
  await channel.assertExchange(exchange, 'topic', { durable: false, autoDelete: true });
  const { queue } = await channel.assertQueue('', { exclusive: true });
  await channel.bindQueue(queue, exchange, 'events');
  const { queue: rawQueue } = await channel.assertQueue('', { exclusive: true });
  await channel.bindQueue(rawQueue, exchange, 'raw');
  const body = Buffer.from(rawBody);
  const rawStarted = wallNow();
  for (let n = 0; n < events; n++) {
    await new Promise<void>((resolve, reject) =>
      channel.publish(exchange, 'raw', body, { mandatory: true, persistent: true, messageId: `raw-${n}` }, (error: Error | null) =>
        error ? reject(error) : resolve(),
      ),
    );
  }
  return {
    channelType: 'rabbitmq',
    broker: { type: 'rabbitmq', url: rabbitUrl, exchanges: [exchange] },
    endpoint: `rabbitmq://bench/${exchange}/events`,
    rawPerSecond: events / ((wallNow() - rawStarted) / 1000),
    consume: async (received) => {
      const { consumerTag } = await channel.consume(
        queue,
        (message: ConsumeMessage | null) => message !== null && received(Number(message.properties.headers?.['Fhir-Last-Event-Number'])),
        { noAck: true },
      );
      return async () => {
        await channel.cancel(consumerTag);
      };
    },
    close: async () => {
      await channel.deleteExchange(exchange).catch(() => undefined);
      await connection.close().catch(() => undefined);
    },
  };
}
