import { z } from 'zod';
import type { Brokers } from '../config/brokers.ts';
import { ShutdownAbort, type CallResult, type ChannelContext, type ChannelTarget } from './channel.ts';
import { absent, payload, required } from './element.ts';

/**
 * What the broker channels (nats-jetstream/, rabbitmq/) share: their
 * Subscription.channel element, the steps of a send before and around the
 * publish, their results, the words of a connection that failed, and the
 * refusal of a broker the operator does not have.
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

/** A send's result, timed from the start of the send: a broker has no HTTP status, Retry-After or response body. */
export type BrokerResult = (verdict: CallResult['verdict'], detail: { error?: string; responseExcerpt?: string }) => CallResult;

/** A send's result maker, timed from now. */
function timedResults(): BrokerResult {
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

/** Where a broker channel publishes: the endpoint read into a destination, and the refusal of one the operator does not allow. */
export type BrokerDestinations<Destination extends { broker: string }> = {
  of(endpoint: string): Destination | undefined;
  refusal(endpoint: string, brokers: Brokers): string | undefined;
};

/**
 * A broker channel's send: the destination checked again against the
 * operator's brokers (an operator who narrowed BROKERS stops publishes there,
 * for good), the broker's client opened (`open`; a broker that cannot be
 * reached is retried, as a 5xx is), then `publish`, which says what came of it.
 */
export async function sendToBroker<Destination extends { broker: string }, Client>(
  context: ChannelContext,
  target: ChannelTarget,
  signal: AbortSignal | undefined,
  destinations: BrokerDestinations<Destination>,
  open: (destination: Destination, timeoutMs: number) => Promise<Client | undefined>,
  publish: (client: Client, destination: Destination, timeoutMs: number, result: BrokerResult) => Promise<CallResult>,
): Promise<CallResult> {
  if (signal?.aborted) throw new ShutdownAbort('the notification was not published: the worker is shutting down; it goes again');
  const result = timedResults();
  const refused = destinations.refusal(target.endpoint, context.delivery.brokers);
  if (refused !== undefined) return result('permanent', { error: refused.replace(/^channel\.endpoint/, target.endpoint) });
  const destination = destinations.of(target.endpoint)!;
  const timeoutMs = acknowledgementTimeoutMs(context, target);
  let client: Client | undefined;
  try {
    client = await open(destination, timeoutMs);
  } catch (error) {
    return result('retryable', { error: `the broker ${destination.broker} could not be reached: ${connectionFailure(error)}` });
  }
  if (client === undefined) return result('permanent', { error: `the broker of ${target.endpoint} is not one this service has (BROKERS)` });
  return publish(client, destination, timeoutMs, result);
}

/** The words for the system errors of a connection, which name the broker's address. */
const connectionErrors: Record<string, string> = {
  ECONNREFUSED: 'the connection was refused',
  ECONNRESET: 'the connection was reset',
  ETIMEDOUT: 'the connection timed out',
  EHOSTUNREACH: 'its host is unreachable',
  ENETUNREACH: 'its network is unreachable',
  ENOTFOUND: 'its host name did not resolve',
  EAI_AGAIN: 'its host name did not resolve',
};

/**
 * Why a connection to a broker failed, without the broker's address: a
 * client reads it in its attempts ($status, webhook.delivery_attempts), and
 * where the operator's brokers are is none of its business.
 */
export function connectionFailure(error: unknown): string {
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause : undefined;
  const code = [error, cause].map((part) => (part as { code?: unknown } | undefined)?.code).find((candidate) => typeof candidate === 'string');
  if (typeof code === 'string' && code in connectionErrors) return connectionErrors[code]!;
  const text = error instanceof Error ? error.message : String(error);
  return text.replaceAll(/\[[0-9a-f:.]+\](:\d+)?|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?/gi, 'the broker');
}
