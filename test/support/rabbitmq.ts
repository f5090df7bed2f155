import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import amqp, { type Channel, type ChannelModel, type ConsumeMessage } from 'amqplib';
import { freePort, waitFor } from './receiver.ts';

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

/**
 * A RabbitMQ node of the test's own, on free ports, its data in a folder of
 * its own: to kill and start again. The machine's rabbitmq-server runs it
 * (as the rabbitmq user, so its folders are open to that user), with a
 * configuration of its own that listens on its port alone, no plugins, and
 * the machine's guest user (loopback only).
 */
export type OwnRabbitMq = { url: string; stop(): Promise<void>; start(): Promise<void>; close(): Promise<void> };

export async function startOwnRabbitMq(): Promise<OwnRabbitMq> {
  const [port, distributionPort] = [await freePort(), await freePort()];
  const base = await mkdtemp(path.join(tmpdir(), 'rabbitmq-own-'));
  const node = `fhir-webhooks-test-${port}@localhost`;
  await mkdir(path.join(base, 'mnesia'));
  await mkdir(path.join(base, 'log'));
  await writeFile(path.join(base, 'rabbitmq.conf'), `listeners.tcp.local = 127.0.0.1:${port}\n`);
  await writeFile(path.join(base, 'rabbitmq-env.conf'), '');
  await writeFile(path.join(base, 'enabled_plugins'), '[].\n');
  // rabbitmq-server drops root for the rabbitmq user, which must write here.
  for (const folder of [base, path.join(base, 'mnesia'), path.join(base, 'log')]) await chmod(folder, 0o777);
  const environment = {
    ...process.env,
    RABBITMQ_NODENAME: node,
    RABBITMQ_NODE_PORT: String(port),
    RABBITMQ_DIST_PORT: String(distributionPort),
    RABBITMQ_CONFIG_FILE: path.join(base, 'rabbitmq.conf'),
    RABBITMQ_CONF_ENV_FILE: path.join(base, 'rabbitmq-env.conf'),
    RABBITMQ_MNESIA_BASE: path.join(base, 'mnesia'),
    RABBITMQ_LOG_BASE: path.join(base, 'log'),
    RABBITMQ_ENABLED_PLUGINS_FILE: path.join(base, 'enabled_plugins'),
    ERL_EPMD_ADDRESS: '127.0.0.1',
  };
  const url = `amqp://guest:guest@127.0.0.1:${port}`;
  const start = async () => {
    spawn('rabbitmq-server', [], { env: environment, stdio: 'ignore', detached: true }).unref();
    await waitFor(
      async () => {
        const probe = await amqp.connect(url).catch(() => undefined);
        await probe?.close();
        return probe === undefined ? undefined : true;
      },
      60_000,
      'the own RabbitMQ node to listen',
    );
  };
  // Its Erlang VM (the process listening on its port: the VM's arguments do not name the node), killed: what a crash does
  // (a publish it confirmed is on disk). The machine's own node, on another port, is never touched.
  const listener = () => /pid=(\d+)/.exec(spawnSync('ss', ['-ltnpH', `sport = :${port}`], { encoding: 'utf8' }).stdout)?.[1];
  const stop = async () => {
    const pid = listener();
    if (pid !== undefined) process.kill(Number(pid), 'SIGKILL');
    await waitFor(() => (listener() === undefined ? true : undefined), 10_000, 'the own RabbitMQ node to stop');
  };
  await start();
  return {
    url,
    stop,
    start,
    close: async () => {
      await stop();
      await rm(base, { recursive: true, force: true });
    },
  };
}
