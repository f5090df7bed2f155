import { JetStreamApiError } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';
import type { Channel, ChannelContext, ProcessParts } from '../channel.ts';
import { acknowledgementTimeoutMs, brokerElement, sendToBroker } from '../broker.ts';
import { NatsConnections } from './connections.ts';
import { destinationOf, destinationRefusal } from './destination.ts';

/**
 * The NATS JetStream channel (issue 37): a topic-based subscription's
 * notifications published to a subject of one of the operator's brokers
 * (BROKERS; src/channels/nats-jetstream/destination.ts), each delivered only
 * once the stream has acknowledged it. Its message id is the subscription's
 * and the notification's (the same for every retry of it), so a stream's
 * duplicate window, and a consumer's own dedupe, drop a redelivery. A topic-
 * based subscription's notifications go one at a time in event-number order
 * (src/dispatch/subscriber.ts), so they reach the stream in that order,
 * unless the subscription asks for more at once (parallel-calls). A
 * notification is no larger than the server takes (maxBodyBytes).
 */

/** What the channel publishes with: the process's connections to the brokers. */
export type NatsContext = ChannelContext & { nats: NatsConnections };

/** A process's connections to the operator's NATS brokers, made as they are first used. */
export function openNatsParts(delivery: ChannelContext['delivery']): ProcessParts<{ nats: NatsConnections }> {
  const nats = new NatsConnections(delivery.brokers);
  return { parts: { nats }, close: () => nats.close() };
}

/** The Bundle's media type, as a rest-hook call's body has it. */
const contentType = 'application/fhir+json';

/** Room kept in a message for its headers (about 250 bytes: the content type, the subscription, the event number, the message id). */
const headersBytes = 1024;

/** A NATS server's max_payload unless its configuration says otherwise: 1 MiB. */
const defaultMaxPayload = 1024 * 1024;

/** JetStream's error code for a message larger than the stream's max_msg_size. */
const messageExceedsStreamMaximum = 10054;

export const natsJetStream: Channel<NatsContext> = {
  type: 'nats-jetstream',
  custom: { r4Type: 'message' },
  receivers: { at: 'endpoint' },
  // A publish is a call to the broker: a subscription's calls a second bound it too.
  paced: true,
  topicOnly: true,
  element: brokerElement('nats-jetstream'),
  endpointRefusal: (endpoint, { brokers }) => destinationRefusal(endpoint, brokers),
  // A message takes the server's max_payload at most, or the stream's max_msg_size, its headers with it. When the broker
  // cannot be asked now (the send will most likely fail too), NATS's default max_payload: a run split more than needed is
  // better than one refused for good.
  async maxBodyBytes(context, target) {
    const destination = destinationOf(target.endpoint);
    if (destination === undefined) return undefined;
    const timeoutMs = acknowledgementTimeoutMs(context, target);
    const maxMessageBytes = await context.nats.maxMessageBytes(destination.broker, destination.subject, timeoutMs).catch(() => undefined);
    return (maxMessageBytes ?? defaultMaxPayload) - headersBytes;
  },
  send: (context, target, { body, message, lastEventNumber }, signal) =>
    sendToBroker(
      context,
      target,
      signal,
      { of: destinationOf, refusal: destinationRefusal },
      (destination, timeoutMs) => context.nats.jetstream(destination.broker, timeoutMs),
      async (client, destination, timeoutMs, result) => {
        const messageHeaders = headers();
        messageHeaders.set('Content-Type', contentType);
        messageHeaders.set('Fhir-Subscription', target.id);
        if (lastEventNumber !== null) messageHeaders.set('Fhir-Last-Event-Number', String(lastEventNumber));
        const payload = JSON.stringify(body);
        try {
          const ack = await client.publish(destination.subject, payload, {
            msgID: `${target.id}:${message}`,
            headers: messageHeaders,
            timeout: timeoutMs,
          });
          return result('delivered', {
            responseExcerpt: `stream ${ack.stream}, sequence ${ack.seq}${ack.duplicate ? ' (a duplicate: the stream had it already)' : ''}`,
          });
        } catch (error) {
          // No stream takes the subject (NATS answers "no responders"), the stream refused it (full, discarding new), or no acknowledgement in time: retried, as a 5xx is.
          const text = error instanceof Error ? error.message : String(error);
          // Too large for the server or the stream (a single event's notification: a run is split to fit): refused whatever the retries.
          if (/max_payload/.test(text) || (error instanceof JetStreamApiError && error.code === messageExceedsStreamMaximum)) {
            return result('permanent', {
              error: `the notification is ${Buffer.byteLength(payload)} bytes, more than the broker ${destination.broker} takes (${text}): payload id-only or a smaller resource would fit`,
            });
          }
          if (/no responders|not enabled/i.test(text)) {
            return result('retryable', { error: `no JetStream stream of the broker ${destination.broker} takes the subject ${destination.subject}` });
          }
          if (error instanceof JetStreamApiError) {
            return result('retryable', { error: `the stream of the broker ${destination.broker} refused the message: ${text}` });
          }
          return result('retryable', { error: `the broker ${destination.broker} did not acknowledge the message: ${text}` });
        }
      },
    ),
};
