import { z } from 'zod';
import type { Brokers } from '../config/brokers.ts';
import type { CallResult, ChannelContext, ChannelTarget } from './channel.ts';
import { absent, payload, required } from './element.ts';

/**
 * What the broker channels (nats-jetstream/, rabbitmq/) share: their
 * Subscription.channel element, the time they wait for the broker, their
 * results, and the refusal of a broker the operator does not have.
 */

/** A broker channel's element: R4's message type (the channel's own code is in the backport-channel-type extension), an endpoint, no headers. */
export function brokerElement(code: string) {
  return z.object({
    type: z.literal('message', { error: `channel.type must be message, with the backport-channel-type extension's ${code} on it (channel._type)` }),
    endpoint: z.string(required('channel.endpoint')),
    payload,
    header: absent('channel.header is sent with rest-hook calls; a message to a broker carries its own headers'),
  });
}

/** How long a publish waits for the broker's acknowledgement: the response timeout, or the subscription's backport-timeout when shorter. */
export function acknowledgementTimeoutMs(context: ChannelContext, target: ChannelTarget): number {
  return Math.min(context.delivery.responseTimeoutMs, target.topic?.timeoutMs ?? Infinity);
}

/** A send's result maker, timed from now: a broker has no HTTP status, Retry-After or response body. */
export function timedResults(): (verdict: CallResult['verdict'], detail: { error?: string; responseExcerpt?: string }) => CallResult {
  const startedAt = new Date();
  const started = performance.now();
  return (verdict, { error, responseExcerpt }) => ({
    verdict,
    httpStatus: undefined,
    error,
    responseExcerpt,
    retryAfterSeconds: undefined,
    startedAt,
    durationMs: Math.round(performance.now() - started),
  });
}

/** The refusal of an endpoint naming `name`, when the operator has no broker of `type` by that name; undefined when it has. */
export function unknownBrokerRefusal(brokers: Brokers, name: string, type: Brokers[string]['type'], label: string): string | undefined {
  if (brokers[name]?.type === type) return undefined;
  const named = Object.entries(brokers)
    .filter(([, broker]) => broker.type === type)
    .map(([candidate]) => candidate);
  return `channel.endpoint names the broker ${name}, which this service does not have as a ${label} broker (${named.length === 0 ? 'it has none' : `it has ${named.join(', ')}`})`;
}
