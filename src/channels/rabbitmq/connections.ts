import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import type { Brokers } from '../../config/brokers.ts';

/** A confirm channel to a broker, and the message ids the broker returned as unroutable on it. */
export type Publisher = { channel: ConfirmChannel; returned: Set<string> };

/**
 * A process's connections to the operator's RabbitMQ brokers (BROKERS): one
 * connection and one confirm channel per broker, made on the first send and
 * kept while they last. The broker closes a channel on a publish it refuses (an
 * exchange that does not exist) and a connection when it stops: either is
 * forgotten then, and the next send makes them again, so a broker that comes
 * back needs no operator. Messages the broker returns as unroutable
 * (mandatory) are noted by id: the return comes before the confirm.
 */
export class RabbitConnections {
  private readonly brokers: Brokers;
  private readonly publishers = new Map<string, Promise<{ connection: ChannelModel; publisher: Publisher }>>();

  constructor(brokers: Brokers) {
    this.brokers = brokers;
  }

  /** The publisher of the broker named `name`; undefined when the operator has no such RabbitMQ broker (any more). */
  async publisher(name: string, timeoutMs: number): Promise<Publisher | undefined> {
    const broker = this.brokers[name];
    if (broker?.type !== 'rabbitmq') return undefined;
    let opened = this.publishers.get(name);
    if (opened === undefined) {
      opened = (async () => {
        const connection = await amqp.connect(broker.url, { timeout: timeoutMs, clientProperties: { connection_name: 'fhir-webhooks' } });
        const forget = () => {
          if (this.publishers.get(name) === opened) this.publishers.delete(name);
        };
        connection.on('close', forget);
        // Without a listener an 'error' would be thrown; the close that follows it forgets the connection.
        connection.on('error', () => undefined);
        const channel = await connection.createConfirmChannel();
        const returned = new Set<string>();
        channel.on('return', (message: { properties: { messageId?: unknown } }) => returned.add(String(message.properties.messageId)));
        channel.on('error', () => undefined);
        channel.on('close', () => {
          forget();
          void connection.close().catch(() => undefined);
        });
        return { connection, publisher: { channel, returned } };
      })();
      this.publishers.set(name, opened);
      opened.catch(() => this.publishers.delete(name));
    }
    return (await opened).publisher;
  }

  async close(): Promise<void> {
    const open = [...this.publishers.values()];
    this.publishers.clear();
    await Promise.allSettled(open.map(async (opened) => (await opened).connection.close()));
  }
}
