import { randomUUID } from 'node:crypto';
import amqp, { type Channel, type ChannelModel, type ConsumeMessage } from 'amqplib';
import { waitFor } from './receiver.ts';

/** The RabbitMQ every machine of this project runs (and CI's), guest/guest on the default virtual host. */
export const rabbitUrl = process.env.TEST_RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

/**
 * An exchange of its own on the machine's RabbitMQ (a topic exchange, so that
 * files running at once never see each other's messages), with a queue bound
 * to it for the routing keys `fhir.#`, and what that queue received, in order.
 */
export type TestExchange = {
  exchange: string;
  /** The messages the queue received, in order, once at least `count` are there. */
  messages(count: number, timeoutMs?: number): Promise<ConsumeMessage[]>;
  close(): Promise<void>;
};

export async function createTestExchange(): Promise<TestExchange> {
  const connection: ChannelModel = await amqp.connect(rabbitUrl);
  const channel: Channel = await connection.createChannel();
  const exchange = `fhir-webhooks-test-${randomUUID()}`;
  await channel.assertExchange(exchange, 'topic', { durable: false, autoDelete: true });
  const { queue } = await channel.assertQueue('', { exclusive: true });
  await channel.bindQueue(queue, exchange, 'fhir.#');
  const received: ConsumeMessage[] = [];
  await channel.consume(queue, (message) => message !== null && received.push(message), { noAck: true });
  return {
    exchange,
    messages: (count, timeoutMs = 10_000) => waitFor(() => (received.length >= count ? received : undefined), timeoutMs, `${count} messages in the queue`),
    close: async () => {
      await channel.deleteExchange(exchange).catch(() => undefined);
      await connection.close().catch(() => undefined);
    },
  };
}
