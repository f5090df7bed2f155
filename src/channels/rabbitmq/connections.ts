import amqp, { type ChannelModel } from 'amqplib';
import type { Brokers } from '../../config/brokers.ts';
import { notPublishedAtShutdown, withinMs } from '../broker.ts';
import { Publisher } from './publisher.ts';

/** The heartbeat asked of the broker: a connection whose path went dead is closed after two missed, about 20 seconds. */
const heartbeatSeconds = 10;

/** How long closing a connection is waited for at shutdown. */
const closingMs = 2_000;

/**
 * A process's connections to the operator's RabbitMQ brokers (BROKERS): one
 * connection per broker, and on it one confirm channel per exchange, each made
 * on the first send and kept while it lasts. The broker closes a channel when
 * it refuses a publish (an exchange that does not exist), and so a channel is
 * an exchange's alone: the other exchanges' publishes in flight on the
 * connection go on. The broker closes the connection when it stops. Either is
 * forgotten then, and the next send makes it again: a broker that comes back
 * needs no operator.
 */
export class RabbitConnections {
  private readonly brokers: Brokers;
  private readonly connections = new Map<string, Promise<ChannelModel>>();
  /** The connections made, by broker: what a connection's close is compared with. */
  private readonly open = new Map<string, ChannelModel>();
  /** By broker and exchange. */
  private readonly publishers = new Map<string, Promise<Publisher>>();
  private closed = false;

  constructor(brokers: Brokers) {
    this.brokers = brokers;
  }

  /** The publisher to `exchange` of the broker named `name`; undefined when the operator has no such RabbitMQ broker (any more). */
  async publisher(name: string, exchange: string, timeoutMs: number): Promise<Publisher | undefined> {
    if (this.brokers[name]?.type !== 'rabbitmq') return undefined;
    const key = `${name}/${exchange}`;
    const kept = this.publishers.get(key);
    const publisher = await kept;
    if (publisher !== undefined && !publisher.closed) return publisher;
    // None yet, or the broker closed its channel: another, unless a concurrent send made it already.
    let opened = this.publishers.get(key);
    if (opened === kept || opened === undefined) {
      const made = this.connection(name, timeoutMs).then(async (connection) => {
        const channel = await withinMs(connection.createConfirmChannel(), timeoutMs, (late) => void late.close().catch(() => undefined)).catch(
          (error: unknown) => {
            // No channel in time: the connection's path is dead, or the broker blocks it. The next send makes another, and
            // this one is closed (on a dead path, its heartbeats end it first).
            this.forgetConnection(name, connection);
            void withinMs(connection.close(), closingMs).catch(() => undefined);
            throw error;
          },
        );
        return new Publisher(channel);
      });
      this.publishers.set(key, made);
      made.catch(() => {
        if (this.publishers.get(key) === made) this.publishers.delete(key);
      });
      opened = made;
    }
    return opened;
  }

  /** The connection to the broker named `name`, made when there is none. */
  private connection(name: string, timeoutMs: number): Promise<ChannelModel> {
    const kept = this.connections.get(name);
    if (kept !== undefined) return kept;
    const broker = this.brokers[name];
    if (broker?.type !== 'rabbitmq') return Promise.reject(new Error(`no RabbitMQ broker ${name}`));
    const made = (async () => {
      if (this.closed) throw notPublishedAtShutdown();
      // The socket's timeout bounds the connection and its handshake; heartbeats then tell a dead path (unless the operator's URL sets them).
      const url = new URL(broker.url);
      if (!url.searchParams.has('heartbeat')) url.searchParams.set('heartbeat', String(heartbeatSeconds));
      const connection = await amqp.connect(url.toString(), { timeout: timeoutMs, clientProperties: { connection_name: 'fhir-webhooks' } });
      // Made while this process was closing them: not kept open.
      if (this.closed) {
        void connection.close().catch(() => undefined);
        throw notPublishedAtShutdown();
      }
      // Without a listener an 'error' would be thrown; the close that follows it forgets the connection.
      connection.on('error', () => undefined);
      connection.on('close', () => this.forgetConnection(name, connection));
      this.open.set(name, connection);
      return connection;
    })();
    this.connections.set(name, made);
    made.catch(() => {
      if (this.connections.get(name) === made) this.connections.delete(name);
    });
    return made;
  }

  /** Forgets `connection` and its exchanges' channels, when it is still the broker's: the next send makes them again. */
  private forgetConnection(name: string, connection: ChannelModel): void {
    if (this.open.get(name) !== connection) return;
    this.open.delete(name);
    this.connections.delete(name);
    for (const key of [...this.publishers.keys()]) if (key.startsWith(`${name}/`)) this.publishers.delete(key);
  }

  /** Closes the connections, waiting for each a few seconds at most: one whose path went dead would wait for its heartbeats. */
  async close(): Promise<void> {
    this.closed = true;
    const opening = [...this.connections.values()];
    this.connections.clear();
    this.open.clear();
    this.publishers.clear();
    await Promise.allSettled(
      opening.map((opened) =>
        withinMs(
          opened.then((connection) => connection.close()),
          closingMs,
        ),
      ),
    );
  }
}
