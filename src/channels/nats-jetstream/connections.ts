import { connect, type ConnectionOptions, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, type JetStreamClient } from '@nats-io/jetstream';
import type { Brokers } from '../../config/brokers.ts';
import { notPublishedAtShutdown } from '../broker.ts';

/**
 * A process's connections to the operator's NATS brokers (BROKERS), made on
 * the first send to each and kept: the client reconnects by itself after the
 * broker restarts, and buffers nothing unacknowledged for us (a publish that
 * gets no acknowledgement fails, and the event is retried). A connection that
 * could not be made is not kept: the next send tries again.
 */
/** How long a stream's max_msg_size is taken as known. */
const streamLimitsKeptMs = 60_000;

export class NatsConnections {
  private readonly brokers: Brokers;
  private readonly connections = new Map<string, Promise<NatsConnection>>();
  /** The max_msg_size of the stream taking a subject, by broker and subject, and until when it is taken as known. */
  private readonly streamLimits = new Map<string, { limit: number | undefined; until: number }>();
  private closed = false;

  constructor(brokers: Brokers) {
    this.brokers = brokers;
  }

  /** The JetStream client of the broker named `name`; undefined when the operator has no such broker (any more). */
  async jetstream(name: string, timeoutMs: number): Promise<JetStreamClient | undefined> {
    const connection = this.connection(name, timeoutMs);
    return connection === undefined ? undefined : jetstream(await connection, { timeout: timeoutMs });
  }

  /**
   * The largest message, headers included, that `subject` of the broker
   * named `name` takes: its server's max_payload (as it said when the
   * connection was made), or the max_msg_size of the stream taking the subject
   * when smaller. The stream's is asked of the JetStream API once a minute at
   * most; when the service's credentials may not ask, the server's alone.
   */
  async maxMessageBytes(name: string, subject: string, timeoutMs: number): Promise<number | undefined> {
    const connection = await this.connection(name, timeoutMs);
    const maxPayload = connection?.info?.max_payload;
    if (connection === undefined || maxPayload === undefined) return undefined;
    const key = `${name}/${subject}`;
    let known = this.streamLimits.get(key);
    if (known === undefined || known.until < Date.now()) {
      known = { limit: await streamMaxMessageSize(connection, subject, timeoutMs), until: Date.now() + streamLimitsKeptMs };
      this.streamLimits.set(key, known);
    }
    return known.limit === undefined ? maxPayload : Math.min(maxPayload, known.limit);
  }

  /** The connection to the broker named `name`, made when there is none; undefined when the operator has no such broker. */
  private connection(name: string, timeoutMs: number): Promise<NatsConnection> | undefined {
    const broker = this.brokers[name];
    if (broker?.type !== 'nats-jetstream') return undefined;
    let connection = this.connections.get(name);
    if (connection === undefined) {
      const url = new URL(broker.url);
      connection = this.connect({
        servers: `${url.protocol}//${url.host}`,
        // The credentials go to the client apart from the server's address, which it may show in its errors: a user and
        // password, or a token alone (nats://<token>@host, as NATS's own tools write it).
        ...credentialsOf(url),
        // tls:// requires TLS: without it the client uses TLS only when the server offers it, and would send the credentials in clear.
        ...(url.protocol === 'tls:' ? { tls: {} } : {}),
        name: 'fhir-webhooks',
        timeout: timeoutMs,
        // Once connected, it reconnects for as long as the process runs: a broker that comes back needs no operator.
        maxReconnectAttempts: -1,
      });
      this.connections.set(name, connection);
      const made = connection;
      const forget = () => {
        if (this.connections.get(name) === made) this.connections.delete(name);
      };
      // Not made, or closed for good (the client gives up reconnecting after repeated authorization errors): the next send connects again.
      made.then((connected) => connected.closed().then(forget), forget);
    }
    return connection;
  }

  /** A connection, closed again when it was made while this process was closing them. */
  private async connect(options: ConnectionOptions): Promise<NatsConnection> {
    if (this.closed) throw notPublishedAtShutdown();
    const connection = await connect(options);
    if (this.closed) {
      void connection.close();
      throw notPublishedAtShutdown();
    }
    return connection;
  }

  async close(): Promise<void> {
    this.closed = true;
    const open = [...this.connections.values()];
    this.connections.clear();
    await Promise.allSettled(open.map(async (connection) => (await connection).close()));
  }
}

/** The credentials in a broker's URL, as the client takes them. */
function credentialsOf(url: URL): { user: string; pass: string } | { token: string } | Record<string, never> {
  if (url.username === '') return {};
  if (url.password === '') return { token: decodeURIComponent(url.username) };
  return { user: decodeURIComponent(url.username), pass: decodeURIComponent(url.password) };
}

/** The max_msg_size of the stream taking `subject`; undefined when it has none (-1), no stream takes it, or the API may not be asked. */
async function streamMaxMessageSize(connection: NatsConnection, subject: string, timeoutMs: number): Promise<number | undefined> {
  try {
    const manager = await jetstreamManager(connection, { timeout: timeoutMs, checkAPI: false });
    const stream = await manager.streams.find(subject);
    const { config } = await manager.streams.info(stream);
    return config.max_msg_size !== undefined && config.max_msg_size > 0 ? config.max_msg_size : undefined;
  } catch {
    return undefined;
  }
}
