import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import amqp, { type ConsumeMessage } from 'amqplib';
import pg from 'pg';
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
  return [await natsRow(url, receiver, events), await rabbitRow(url, receiver, events)];
}

type Received = { eventNumbers: number[] };

/** What a broker row reports: the service's rate, the bare client's, and the checks of what the consumer got. */
function brokerRow(broker: string, events: number, seconds: number, rawPerSecond: number, received: Received): Row {
  const numbers = received.eventNumbers;
  const inOrder = numbers.every((number, index) => number === index + 1);
  const perSecond = events / seconds;
  return {
    row: `${broker}: one topic subscription, ${events.toLocaleString('en')} events of one statement into the broker, received in order (raw: a bare client, each acknowledged, ${Math.round(rawPerSecond).toLocaleString('en')} msgs/s)`,
    figure: perSecond,
    unit: 'events/s',
    ratioToCeiling: perSecond / rawPerSecond,
    checks: `${numbers.length} received, ${new Set(numbers).size} distinct, ${inOrder ? 'in order' : 'OUT OF ORDER'}`,
  };
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

async function natsRow(url: string, receiver: BenchReceiver, events: number): Promise<Row> {
  const connection = await connect({ servers: natsUrl });
  const manager = await jetstreamManager(connection);
  const name = `fhir_webhooks_bench_${randomUUID().replaceAll('-', '')}`;
  const prefix = name.replaceAll('_', '-');
  // A stream for the bare client's messages and one for the subscription's: the ordered consumer reads the latter whole
  // (a consumer's filter_subjects needs NATS 2.10; this machine runs 2.9).
  await manager.streams.add({ name, subjects: [`${prefix}.>`] });
  await manager.streams.add({ name: `${name}_raw`, subjects: [`${prefix}-raw.>`] });
  try {
    // The raw rate: as many messages of a notification's size, one at a time, each acknowledged.
    const client = jetstream(connection);
    const body = JSON.stringify({ resourceType: 'Bundle', padding: 'x'.repeat(700) });
    const rawStarted = wallNow();
    for (let n = 0; n < events; n++) await client.publish(`${prefix}-raw.messages`, body, { msgID: `raw-${n}` });
    const rawPerSecond = events / ((wallNow() - rawStarted) / 1000);

    const brokers = JSON.stringify({ bench: { type: 'nats-jetstream', url: natsUrl, subjects: [`${prefix}.>`] } });
    return await withDispatcher(
      url,
      receiver,
      async (bench) => {
        const topicUrl = await addExampleTopic(bench);
        const writer = new pg.Client({ connectionString: url });
        await writer.connect();
        try {
          const id = await brokerSubscription(bench, writer, topicUrl, 'nats-jetstream', `nats-jetstream://bench/${prefix}.events`);
          // The consumer: an ordered consumer of the subject, reading as the messages arrive.
          const consumer = await client.consumers.get(name);
          const eventNumbers: number[] = [];
          let lastAt = 0;
          const messages = await consumer.consume();
          const reading = (async () => {
            for await (const message of messages) {
              eventNumbers.push(Number(message.headers?.get('Fhir-Last-Event-Number')));
              lastAt = wallNow();
              if (eventNumbers.length >= events) break;
            }
          })();
          const committedAt = await writeFinished(writer, 'bench-nats-', 'Patient/bench-nats', events);
          await until(async () => eventNumbers.length >= events, 120_000, 'every message');
          await sleep(300);
          await messages.close();
          await reading;
          await switchOff(writer, id);
          return brokerRow('nats-jetstream', events, (lastAt - committedAt) / 1000, rawPerSecond, { eventNumbers });
        } finally {
          await writer.end();
        }
      },
      'worker',
      { BROKERS: brokers },
    );
  } finally {
    await manager.streams.delete(name).catch(() => undefined);
    await manager.streams.delete(`${name}_raw`).catch(() => undefined);
    await connection.close();
  }
}

async function rabbitRow(url: string, receiver: BenchReceiver, events: number): Promise<Row> {
  const connection = await amqp.connect(rabbitUrl);
  const channel = await connection.createConfirmChannel();
  const exchange = `fhir-webhooks-bench-${randomUUID()}`;
  await channel.assertExchange(exchange, 'topic', { durable: false, autoDelete: true });
  const { queue } = await channel.assertQueue('', { exclusive: true });
  await channel.bindQueue(queue, exchange, 'events');
  const { queue: rawQueue } = await channel.assertQueue('', { exclusive: true });
  await channel.bindQueue(rawQueue, exchange, 'raw');
  try {
    const body = Buffer.from(JSON.stringify({ resourceType: 'Bundle', padding: 'x'.repeat(700) }));
    const rawStarted = wallNow();
    for (let n = 0; n < events; n++) {
      await new Promise<void>((resolve, reject) =>
        channel.publish(exchange, 'raw', body, { mandatory: true, persistent: true, messageId: `raw-${n}` }, (error: Error | null) =>
          error ? reject(error) : resolve(),
        ),
      );
    }
    const rawPerSecond = events / ((wallNow() - rawStarted) / 1000);

    const brokers = JSON.stringify({ bench: { type: 'rabbitmq', url: rabbitUrl, exchanges: [exchange] } });
    return await withDispatcher(
      url,
      receiver,
      async (bench) => {
        const topicUrl = await addExampleTopic(bench);
        const writer = new pg.Client({ connectionString: url });
        await writer.connect();
        try {
          const id = await brokerSubscription(bench, writer, topicUrl, 'rabbitmq', `rabbitmq://bench/${exchange}/events`);
          const eventNumbers: number[] = [];
          let lastAt = 0;
          await channel.consume(
            queue,
            (message: ConsumeMessage | null) => {
              if (message === null) return;
              eventNumbers.push(Number(message.properties.headers?.['Fhir-Last-Event-Number']));
              lastAt = wallNow();
            },
            { noAck: true },
          );
          const committedAt = await writeFinished(writer, 'bench-rabbit-', 'Patient/bench-rabbit', events);
          await until(async () => eventNumbers.length >= events, 120_000, 'every message');
          await sleep(300);
          await switchOff(writer, id);
          return brokerRow('rabbitmq', events, (lastAt - committedAt) / 1000, rawPerSecond, { eventNumbers });
        } finally {
          await writer.end();
        }
      },
      'worker',
      { BROKERS: brokers },
    );
  } finally {
    await channel.deleteExchange(exchange).catch(() => undefined);
    await connection.close().catch(() => undefined);
  }
}
