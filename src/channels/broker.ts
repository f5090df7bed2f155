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

/** What a broker send throws when the worker is shutting down: it is not an attempt, and the notification goes again after the restart. */
export function notPublishedAtShutdown(): ShutdownAbort {
  return new ShutdownAbort('the notification was not published: the worker is shutting down; it goes again');
}

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
  if (signal?.aborted) throw notPublishedAtShutdown();
  const result = timedResults();
  const refused = destinations.refusal(target.endpoint, context.delivery.brokers);
  if (refused !== undefined) return result('permanent', { error: refused.replace(/^channel\.endpoint/, target.endpoint) });
  const destination = destinations.of(target.endpoint)!;
  const timeoutMs = acknowledgementTimeoutMs(context, target);
  let client: Client | undefined;
  try {
    client = await unlessAborted(open(destination, timeoutMs), signal);
  } catch (error) {
    if (error instanceof ShutdownAbort) throw error;
    const failure = connectionFailure(error);
    if (failure === undefined) {
      context.logger.warn({ broker: destination.broker, error: error instanceof Error ? error.message : String(error) }, 'a broker could not be reached');
    }
    return result('retryable', {
      error: `the broker ${destination.broker} could not be reached: ${failure ?? "the connection failed (the service's log says why)"}`,
    });
  }
  if (client === undefined) return result('permanent', { error: `the broker of ${target.endpoint} is not one this service has (BROKERS)` });
  return unlessAborted(publish(client, destination, timeoutMs, result), signal);
}

/**
 * `work`, or a ShutdownAbort as soon as the worker's shutdown aborts
 * `signal`: a send waiting on a broker does not hold the shutdown up. The work
 * goes on unheeded; the notification goes again after the restart, with the
 * same message id, which a stream's duplicate window and a consumer drop.
 */
function unlessAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return work;
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(notPublishedAtShutdown());
    if (signal.aborted) abort();
    signal.addEventListener('abort', abort, { once: true });
    void work.then(resolve, reject).finally(() => signal.removeEventListener('abort', abort));
  });
}

/**
 * `work`, or an Error('timeout') after `ms`: what a broker's client does not
 * bound itself (opening a channel on a connection whose path went dead waits
 * for the heartbeats to tell). A value that comes after the timeout is given
 * to `late` (a connection or channel to close).
 */
export function withinMs<T>(work: Promise<T>, ms: number, late: (value: T) => void = () => undefined): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      reject(new Error('timeout'));
    }, ms);
    work.then(
      (value) => {
        clearTimeout(timer);
        if (timedOut) late(value);
        else resolve(value);
      },
      (error: Error) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}

/** The words for the errors of a connection by their code: the system's, and TLS's (which name the broker's host). */
const connectionErrors: Record<string, string> = {
  ECONNREFUSED: 'the connection was refused',
  ECONNRESET: 'the connection was reset',
  ETIMEDOUT: 'the connection timed out',
  EHOSTUNREACH: 'its host is unreachable',
  ENETUNREACH: 'its network is unreachable',
  ENOTFOUND: 'its host name did not resolve',
  EAI_AGAIN: 'its host name did not resolve',
  EPROTO: 'the TLS handshake failed',
  ERR_TLS_CERT_ALTNAME_INVALID: 'its TLS certificate is not for its host name',
  DEPTH_ZERO_SELF_SIGNED_CERT: 'its TLS certificate is not trusted',
  SELF_SIGNED_CERT_IN_CHAIN: 'its TLS certificate is not trusted',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'its TLS certificate is not trusted',
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: 'its TLS certificate is not trusted',
  CERT_HAS_EXPIRED: 'its TLS certificate has expired',
  CERT_NOT_YET_VALID: 'its TLS certificate is not valid yet',
};

/** The words for the brokers' own refusals, by what their clients say (none of which names a host). */
const brokerRefusals: [RegExp, string][] = [
  [/ACCESS.REFUSED|Authorization Violation|authentication/i, "the broker refused the service's credentials"],
  [/Expected ConnectionOpenOk/, 'the broker refused to open the connection (its virtual host?)'],
  [/server does not support 'tls'/, 'the broker does not offer TLS, which its tls:// URL requires'],
  [/^timeout$/i, 'no answer in time'],
];

/**
 * Why a connection to a broker failed, in words that never say where the
 * broker is: a client reads them in its attempts ($status,
 * webhook.delivery_attempts), and where the operator's brokers are is none of
 * its business. Undefined for an error not known here: the sender says the
 * connection failed, and logs the error for the operator.
 */
export function connectionFailure(error: unknown): string | undefined {
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause : undefined;
  const code = [error, cause].map((part) => (part as { code?: unknown } | undefined)?.code).find((candidate) => typeof candidate === 'string');
  if (typeof code === 'string' && code in connectionErrors) return connectionErrors[code];
  const text = error instanceof Error ? error.message : String(error);
  return brokerRefusals.find(([said]) => said.test(text))?.[1];
}
