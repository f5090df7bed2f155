import type { Channel, ChannelContext, ProcessParts } from '../channel.ts';
import { brokerElement, sendToBroker } from '../broker.ts';
import { RabbitConnections } from './connections.ts';
import { destinationOf, destinationRefusal } from './destination.ts';

/**
 * The RabbitMQ channel (AMQP 0-9-1; issue 37): a topic-based subscription's
 * notifications published to an exchange of one of the operator's brokers
 * (BROKERS; src/channels/rabbitmq/destination.ts) with the subscription's
 * routing key, on its exchange's confirm channel (connections.ts): delivered
 * only once the broker confirmed it. Mandatory: a message no queue takes is
 * returned, and counts as a failure, not a silent drop. Persistent, with a
 * message id that is the subscription's and the notification's (the same for
 * every retry), for a consumer's dedupe. A topic-based subscription's
 * notifications go one at a time in event-number order, so they reach the
 * exchange in that order, unless the subscription asks for more at once
 * (parallel-calls).
 */

/** What the channel publishes with: the process's connections to the brokers. */
export type RabbitContext = ChannelContext & { rabbit: RabbitConnections };

/** A process's connections to the operator's RabbitMQ brokers, made as they are first used. */
export function openRabbitParts(delivery: ChannelContext['delivery']): ProcessParts<{ rabbit: RabbitConnections }> {
  const rabbit = new RabbitConnections(delivery.brokers);
  return { parts: { rabbit }, close: () => rabbit.close() };
}

export const rabbitmq: Channel<RabbitContext> = {
  type: 'rabbitmq',
  custom: { r4Type: 'message' },
  receivers: { at: 'endpoint' },
  // A publish is a call to the broker: a subscription's calls a second bound it too.
  paced: true,
  topicOnly: true,
  element: brokerElement('rabbitmq'),
  endpointRefusal: (endpoint, { brokers }) => destinationRefusal(endpoint, brokers),
  send: (context, target, { body, message, lastEventNumber }, signal) =>
    sendToBroker(
      context,
      target,
      signal,
      { of: destinationOf, refusal: destinationRefusal },
      (destination, timeoutMs) => context.rabbit.publisher(destination.broker, destination.exchange, timeoutMs),
      async (publisher, destination, timeoutMs, result) => {
        const headers = { 'Fhir-Subscription': target.id, ...(lastEventNumber === null ? {} : { 'Fhir-Last-Event-Number': lastEventNumber }) };
        const options = { persistent: true, messageId: `${target.id}:${message}`, contentType: 'application/fhir+json', headers };
        let published;
        try {
          published = await publisher.publish(destination.exchange, destination.routingKey, Buffer.from(JSON.stringify(body)), options, timeoutMs);
        } catch (error) {
          // An exchange that does not exist (the broker closes the channel; the next send opens another), or no confirm in time: retried, as a 5xx is.
          return result('retryable', {
            error: `the broker ${destination.broker} did not confirm the message to the exchange ${destination.exchange}: ${error instanceof Error ? error.message : String(error)}`,
          });
        }
        if (published === 'returned') {
          return result('retryable', {
            error: `no queue of the broker ${destination.broker} is bound to the exchange ${destination.exchange} for the routing key ${destination.routingKey}: the message was returned`,
          });
        }
        return result('delivered', { responseExcerpt: `confirmed by the broker ${destination.broker}, exchange ${destination.exchange}` });
      },
    ),
};
