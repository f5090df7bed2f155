import { connect, type ConnectionOptions, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, type JetStreamClient } from '@nats-io/jetstream';
import type { Brokers } from '../../config/brokers.ts';
import { ShutdownAbort } from '../channel.ts';

/**
 * A process's connections to the operator's NATS brokers (BROKERS), made on
 * the first send to each and kept: the client reconnects by itself after the
 * broker restarts, and buffers nothing unacknowledged for us (a publish that
 * gets no acknowledgement fails, and the event is retried). A connection that
 * could not be made is not kept: the next send tries again.
 */
export class NatsConnections {
  private readonly brokers: Brokers;
  private readonly connections = new Map<string, Promise<NatsConnection>>();
  private closed = false;

  constructor(brokers: Brokers) {
    this.brokers = brokers;
  }

  /** The JetStream client of the broker named `name`; undefined when the operator has no such broker (any more). */
  async jetstream(name: string, timeoutMs: number): Promise<JetStreamClient | undefined> {
    const connection = this.connection(name, timeoutMs);
    return connection === undefined ? undefined : jetstream(await connection, { timeout: timeoutMs });
  }

  /** The largest message the broker named `name` takes (its max_payload, headers included), as it said when the connection was made. */
  async maxPayload(name: string, timeoutMs: number): Promise<number | undefined> {
    return (await this.connection(name, timeoutMs))?.info?.max_payload;
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
    if (this.closed) throw new ShutdownAbort('the notification was not published: the worker is shutting down; it goes again');
    const connection = await connect(options);
    if (this.closed) {
      void connection.close();
      throw new ShutdownAbort('the notification was not published: the worker is shutting down; it goes again');
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
