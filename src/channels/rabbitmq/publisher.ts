import type { ConfirmChannel, Options } from 'amqplib';

/** What came of a publish the broker confirmed: taken by a queue, or returned as unroutable (mandatory). */
export type Published = 'confirmed' | 'returned';

/**
 * A confirm channel of one exchange (src/channels/rabbitmq/connections.ts):
 * its publishes, and the returns the broker sends for the mandatory messages
 * no queue takes. A return comes before the confirm of its message, so a
 * publish learns of it while it waits; one that comes after the wait gave up
 * finds no one waiting and is dropped. The broker closes the channel when it
 * refuses a publish (an exchange that does not exist); the reason it gave is
 * the error of the publishes waiting then, and of any later one.
 */
export class Publisher {
  private readonly channel: ConfirmChannel;
  /** The publishes waiting for their confirm, by message id: whether the broker returned it. */
  private readonly waiting = new Map<string, { returned: boolean }>();
  private closedBecause: string | undefined;

  constructor(channel: ConfirmChannel) {
    this.channel = channel;
    channel.on('return', (message: { properties: { messageId?: unknown } }) => {
      const publish = this.waiting.get(String(message.properties.messageId));
      if (publish !== undefined) publish.returned = true;
    });
    channel.on('error', (error: Error & { code?: number }) => {
      this.closedBecause = closingReason(error);
    });
    channel.on('close', () => {
      this.closedBecause ??= 'the channel was closed';
    });
  }

  /** Resolves once the broker confirmed the message; rejects when it refused it, closed the channel, or did not confirm within `timeoutMs`. */
  publish(exchange: string, routingKey: string, content: Buffer, options: Options.Publish & { messageId: string }, timeoutMs: number): Promise<Published> {
    if (this.closedBecause !== undefined) return Promise.reject(new Error(this.closedBecause));
    const publish = { returned: false };
    this.waiting.set(options.messageId, publish);
    return new Promise<Published>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no confirm within ${timeoutMs} ms`)), timeoutMs);
      const settle = (error: Error | null) => {
        clearTimeout(timer);
        if (error) reject(new Error(this.closedBecause ?? error.message));
        else resolve(publish.returned ? 'returned' : 'confirmed');
      };
      try {
        this.channel.publish(exchange, routingKey, content, { ...options, mandatory: true }, settle);
      } catch (error) {
        // The client throws when the channel closed a moment ago, before its close was told.
        settle(error as Error);
      }
    }).finally(() => {
      if (this.waiting.get(options.messageId) === publish) this.waiting.delete(options.messageId);
    });
  }

  /** Whether the broker closed the channel (the next publish to its exchange opens another). */
  get closed(): boolean {
    return this.closedBecause !== undefined;
  }

  async close(): Promise<void> {
    if (!this.closed) await this.channel.close().catch(() => undefined);
  }
}

/** The broker's reason for closing a channel, as the client reads it: `404 (NOT-FOUND) with message "NOT_FOUND - no exchange 'x' in vhost '/'"`, without the operator's vhost. */
function closingReason(error: Error & { code?: number }): string {
  const said = /with message "(.*)"$/.exec(error.message)?.[1];
  if (said === undefined) return error.message;
  return `the broker closed the channel: ${error.code ?? ''} ${said.replace(/ in vhost '[^']*'/, '')}`.replace(/: {2}/, ': ');
}
