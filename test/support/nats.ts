import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DiscardPolicy, jetstreamManager, type StoredMsg } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { freePort, waitFor } from './receiver.ts';

/** The NATS server with JetStream every machine of this project runs (and CI's: .ci/run starts it when it is not). */
export const natsUrl = process.env.TEST_NATS_URL ?? 'nats://127.0.0.1:4222';

/**
 * A JetStream stream of its own on the machine's NATS server, taking the
 * subjects under a prefix of its own (so that files running at once never
 * see each other's messages), and what it holds, in stream order. With
 * `maxMessages`, a stream that holds that many at most and refuses a publish
 * beyond them (discard new): a consumer that has not read yet; with
 * `maxMessageSize`, one that refuses a larger message.
 */
export type TestStream = {
  /** The subjects it takes: `<prefix>.>`. */
  prefix: string;
  /** Its messages, in stream order, once at least `count` are there. */
  messages(count: number, timeoutMs?: number): Promise<StoredMsg[]>;
  /** Its first message, read and deleted (room for another), or undefined when it holds none. */
  take(): Promise<StoredMsg | undefined>;
  close(): Promise<void>;
};

export async function createTestStream(
  url = natsUrl,
  { maxMessages, maxMessageSize }: { maxMessages?: number; maxMessageSize?: number } = {},
): Promise<TestStream> {
  const connection: NatsConnection = await connect({ servers: url, maxReconnectAttempts: -1 });
  const manager = await jetstreamManager(connection);
  const name = `fhir_webhooks_test_${randomUUID().replaceAll('-', '')}`;
  const prefix = name.replaceAll('_', '-');
  await manager.streams.add({
    name,
    subjects: [`${prefix}.>`],
    ...(maxMessages === undefined ? {} : { max_msgs: maxMessages, discard: DiscardPolicy.New }),
    ...(maxMessageSize === undefined ? {} : { max_msg_size: maxMessageSize }),
  });
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
          // A server starting again answers nothing for a moment: asked again.
          const found = await read().catch(() => []);
          return found.length >= count ? found : undefined;
        },
        timeoutMs,
        `${count} messages in the stream`,
      ),
    take: async () => {
      const { state } = await manager.streams.info(name);
      if (state.messages === 0) return undefined;
      const first = await manager.streams.getMessage(name, { seq: state.first_seq });
      await manager.streams.deleteMessage(name, state.first_seq);
      return first ?? undefined;
    },
    close: async () => {
      await manager.streams.delete(name).catch(() => undefined);
      await connection.close();
    },
  };
}

/** A NATS server with JetStream of the test's own, on a free port, its store in a folder of its own: to stop and start again, or to take smaller messages. */
export type OwnNatsServer = { url: string; stop(): Promise<void>; start(): Promise<void>; close(): Promise<void> };

export async function startOwnNatsServer({ maxPayload, token }: { maxPayload?: number; token?: string } = {}): Promise<OwnNatsServer> {
  const port = await freePort();
  const storeDir = await mkdtemp(path.join(tmpdir(), 'nats-store-'));
  // The largest message it takes, when not its default (1 MiB), and the token it asks for: in a configuration file, as its command line has no flag for the first.
  const configuration = path.join(storeDir, 'nats.conf');
  const settings = [
    ...(maxPayload === undefined ? [] : [`max_payload: ${maxPayload}`]),
    ...(token === undefined ? [] : [`authorization { token: "${token}" }`]),
  ];
  await writeFile(configuration, settings.map((line) => `${line}\n`).join(''));
  let child: ChildProcess | undefined;
  const start = async () => {
    child = spawn('/usr/sbin/nats-server', ['-c', configuration, '-a', '127.0.0.1', '-p', String(port), '-js', '-sd', path.join(storeDir, 'store')], {
      stdio: 'ignore',
    });
    await waitFor(
      async () => {
        const probe = await connect({ servers: `nats://127.0.0.1:${port}`, timeout: 500, ...(token === undefined ? {} : { token }) }).catch(() => undefined);
        await probe?.close();
        return probe === undefined ? undefined : true;
      },
      10_000,
      'the own NATS server to listen',
    );
  };
  const stop = async () => {
    const running = child;
    child = undefined;
    if (running === undefined || running.exitCode !== null) return;
    const exited = once(running, 'exit');
    running.kill('SIGKILL');
    await exited;
  };
  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    stop,
    start,
    close: async () => {
      await stop();
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}
