import { randomUUID } from 'node:crypto';
import { jetstreamManager, type StoredMsg } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { waitFor } from './receiver.ts';

/** The NATS server with JetStream every machine of this project runs (and CI's: .ci/run starts it when it is not). */
export const natsUrl = process.env.TEST_NATS_URL ?? 'nats://127.0.0.1:4222';

/**
 * A JetStream stream of its own on the machine's NATS server, taking the
 * subjects under a prefix of its own (so that files running at once never
 * see each other's messages), and what it holds, in stream order.
 */
export type TestStream = {
  /** The subjects it takes: `<prefix>.>`. */
  prefix: string;
  /** Its messages, in stream order, once at least `count` are there. */
  messages(count: number, timeoutMs?: number): Promise<StoredMsg[]>;
  close(): Promise<void>;
};

export async function createTestStream(): Promise<TestStream> {
  const connection: NatsConnection = await connect({ servers: natsUrl });
  const manager = await jetstreamManager(connection);
  const name = `fhir_webhooks_test_${randomUUID().replaceAll('-', '')}`;
  const prefix = name.replaceAll('_', '-');
  await manager.streams.add({ name, subjects: [`${prefix}.>`] });
  const read = async (): Promise<StoredMsg[]> => {
    const info = await manager.streams.info(name);
    const found: StoredMsg[] = [];
    for (let sequence = 1; sequence <= info.state.last_seq; sequence++) {
      const message = await manager.streams.getMessage(name, { seq: sequence });
      if (message !== null) found.push(message);
    }
    return found;
  };
  return {
    prefix,
    messages: (count, timeoutMs = 10_000) =>
      waitFor(
        async () => {
          const found = await read();
          return found.length >= count ? found : undefined;
        },
        timeoutMs,
        `${count} messages in the stream`,
      ),
    close: async () => {
      await manager.streams.delete(name).catch(() => undefined);
      await connection.close();
    },
  };
}
