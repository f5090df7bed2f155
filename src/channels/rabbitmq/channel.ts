import { ShutdownAbort, type Channel, type ChannelContext } from '../channel.ts';
import { acknowledgementTimeoutMs, brokerElement, timedResults } from '../broker.ts';
import type { RabbitConnections } from './connections.ts';
import { destinationOf, destinationRefusal } from './destination.ts';

/**
 * The RabbitMQ channel (AMQP 0-9-1; issue 37): a topic-based subscription's
 * notifications published to an exchange of one of the operator's brokers
 * (BROKERS; src/channels/rabbitmq/destination.ts) with the subscription's
 * routing key, on a confirm channel: delivered only once the broker confirmed
 * it. Mandatory: a message no queue takes is returned, and counts as a failure,
 * not a silent drop. Persistent, with a message id that is the subscription's
 * and the notification's (the same for every retry), for a consumer's dedupe.
 * A topic-based subscription's notifications go one at a time in event-number
 * order, so they reach the exchange in that order.
 */

/** What the channel publishes with: the process's connections to the brokers. */
export type RabbitContext = ChannelContext & { rabbit: RabbitConnections };

export const rabbitmq: Channel<RabbitContext> = {
  type: 'rabbitmq',
  custom: { r4Type: 'message' },
  receivers: { at: 'endpoint' },
  // A publish is a call to the broker: a subscription's calls a second bound it too.
  paced: true,
  topicOnly: true,
  element: brokerElement('rabbitmq'),
  endpointRefusal: (endpoint, { brokers }) => destinationRefusal(endpoint, brokers),
  async send(context, target, { body, message, lastEventNumber }, signal) {
    if (signal?.aborted) throw new ShutdownAbort('the notification was not published: the worker is shutting down; it goes again');
    const result = timedResults();
    // The request checked it against the operator's brokers; a broker or destination the operator no longer allows is a refusal for good.
    const refused = destinationRefusal(target.endpoint, context.delivery.brokers);
    if (refused !== undefined) return result('permanent', { error: refused.replace(/^channel\.endpoint/, target.endpoint) });
    const destination = destinationOf(target.endpoint);
    const timeoutMs = acknowledgementTimeoutMs(context, target);
    const publisher =
      destination === undefined ? undefined : await context.rabbit.publisher(destination.broker, timeoutMs).catch((error: unknown) => error as Error);
    if (destination === undefined || publisher === undefined) {
      return result('permanent', { error: `the broker of ${target.endpoint} is not one this service has (BROKERS)` });
    }
    if (publisher instanceof Error) return result('retryable', { error: `the broker ${destination.broker} could not be reached: ${publisher.message}` });
    const messageId = `${target.id}:${message}`;
    const headers = { 'Fhir-Subscription': target.id, ...(lastEventNumber === null ? {} : { 'Fhir-Last-Event-Number': lastEventNumber }) };
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no confirm within ${timeoutMs} ms`)), timeoutMs);
        publisher.channel.publish(
          destination.exchange,
          destination.routingKey,
          Buffer.from(JSON.stringify(body)),
          { mandatory: true, persistent: true, messageId, contentType: 'application/fhir+json', headers },
          (error: Error | null) => {
            clearTimeout(timer);
            if (error) reject(error);
            else resolve();
          },
        );
      });
    } catch (error) {
      // An exchange that does not exist closes the channel (made again at the next send); no confirm in time: retried, as a 5xx is.
      return result('retryable', {
        error: `the broker ${destination.broker} did not confirm the message to the exchange ${destination.exchange}: ${error instanceof Error ? error.message : String(error)}`,
      });
    }
    // The broker returns an unroutable message before it confirms it.
    if (publisher.returned.delete(messageId)) {
      return result('retryable', {
        error: `no queue of the broker ${destination.broker} is bound to the exchange ${destination.exchange} for the routing key ${destination.routingKey}: the message was returned`,
      });
    }
    return result('delivered', { responseExcerpt: `confirmed by the broker ${destination.broker}, exchange ${destination.exchange}` });
  },
};
