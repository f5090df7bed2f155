import type { Logger } from 'pino';
import type { z } from 'zod';
import type { Brokers } from '../config/brokers.ts';
import type { Config } from '../config/index.ts';
import type { Db } from '../db/database.ts';
import type { ChannelType } from '../db/schema.ts';

/**
 * A channel is how a notification leaves the service: rest-hook (an HTTP POST
 * to the subscriber's endpoint, src/channels/rest-hook/) or websocket (the
 * clients bound to the subscription, src/channels/websocket/). Everything
 * before and after is the same whatever the channel: the event log, its
 * numbering, claims, retries and states, what a notification holds (its
 * payload level, how many events). A channel only sends one notification to
 * one subscription and says what happened, as a CallResult: delivered,
 * retryable or permanent, which the sender records and acts on. The rest of
 * the service asks a channel what it needs to know about it (its Channel
 * below), through the registry (src/channels/registry.ts), and never compares
 * channel types.
 */

/** What every channel may use to send, whichever process sends (a worker, or an API or CLI process for an operator's $reactivate). */
export type ChannelContext = {
  db: Db;
  delivery: Config['delivery'];
  logger: Pick<Logger, 'info' | 'warn'>;
};

/**
 * What a channel sends with beyond the common context, made once by each
 * process that sends (a broker's connections, rest-hook's agent;
 * openSendParts in src/channels/registry.ts), and how that process closes it.
 */
export type ProcessParts<Parts> = { parts: Parts; close: () => Promise<void> };

/** A subscription as a channel sends to it: its secrets decrypted (src/dispatch/subscriber.ts loads it, with more). */
export type ChannelTarget = {
  id: string;
  /** Where the notifications go: the subscriber's endpoint, or the URL a channel's receivers connect to. */
  endpoint: string;
  /** channel.header as given, each `Name: value`. */
  headers: string[];
  secret: string;
  /**
   * The secret before the last rotation and the end of its overlap, until
   * which calls are signed with it too (checked when a call is signed: a
   * target is reused for a while); undefined: none, or its overlap was over.
   */
  previousSecret: { secret: string; until: Date } | undefined;
  /** A topic-based subscription's backport-timeout, when it asks for less than DELIVERY_RESPONSE_TIMEOUT_MS; undefined for a classic one. */
  topic: { timeoutMs: number | undefined } | undefined;
};

/**
 * An endpoint as it may be shown (attempt errors, alert e-mails, logs):
 * without the user and password of its URL, and with the values of its query
 * masked, where tokens are often put.
 */
export function shownEndpoint(endpoint: string): string {
  try {
    const url = new URL(endpoint);
    if (url.username !== '' || url.password !== '') {
      url.username = '***';
      url.password = url.password === '' ? '' : '***';
    }
    for (const name of [...new Set(url.searchParams.keys())]) url.searchParams.set(name, '***');
    return url.toString().replaceAll('%2A%2A%2A', '***');
  } catch {
    return '(an endpoint that is not a URL)';
  }
}

/** One notification of a subscription: what is sent, and what it is. */
export type Notification = {
  /** The FHIR body: a topic-based subscription's notification Bundle, a classic one's resource or searchset. */
  body: unknown;
  /**
   * What the message is ("handshake", "Patient/1/_history/2", "heartbeat <instant>"): the
   * same for every retry of one message (rest-hook's Standard Webhooks webhook-id is made from it).
   */
  message: string;
  /** What it is, as the Backport IG types a notification (a classic subscription's calls are event notifications too). */
  type: 'handshake' | 'heartbeat' | 'event-notification';
  /** The highest event number it tells of: a topic-based subscription's event notification; else null. */
  lastEventNumber: number | null;
};

/** What a send came to: every channel's result, which the sender records (webhook.delivery_attempts) and acts on. */
export type CallResult = {
  /** delivered: 2xx. retryable: network failure, timeout, 5xx or 429. permanent: any other 4xx (and refused addresses). */
  verdict: 'delivered' | 'retryable' | 'permanent';
  httpStatus: number | undefined;
  /** Why it was not delivered. */
  error: string | undefined;
  /** The start of the response body, for the attempt record. */
  responseExcerpt: string | undefined;
  /** Seconds from a Retry-After header on 429/503. */
  retryAfterSeconds: number | undefined;
  startedAt: Date;
  durationMs: number;
  /** Whose failure it was: the subscriber's endpoint, or the OAuth token endpoint before any call. */
  failedAt?: 'token-endpoint';
  /** The address the SSRF guard refused, for the operator's log only: `error` does not name it. */
  refusedAddress?: string;
};

/** Subscription.channel as a channel's element (Channel.element) gives it, once checked. */
export type ChannelElement = { type: ChannelType; endpoint?: string; payload?: string; header?: string[] };

/** A receiver connected to the service now, as the console shows it (src/api/routes/console.ts). */
export type ConnectedClient = { connection: string; address: string; server: string; boundAt: string };

/**
 * Where a channel's receivers are.
 *
 * - `endpoint`: at the endpoint the subscription names, which the service
 *   calls; a new subscription is requested until its handshake there
 *   succeeds, and its channel's call settings (headers, a timeout, calls a
 *   second, calls at once) apply.
 * - `service`: they connect to the service, at `url(baseUrl)` (stored as the
 *   subscription's endpoint): a new subscription is active at once (each
 *   receiver gets its handshake as it connects), its channel names no
 *   endpoint, and `connected` tells who is connected now.
 */
export type Receivers =
  { at: 'endpoint' } | { at: 'service'; url(baseUrl: string): string; connected(db: Db, subscriptionId: string): Promise<ConnectedClient[]> };

/**
 * A channel: how it sends, and what the rest of the service needs to know
 * about it. `Context` is what its send uses: the common context, and the
 * channel's own parts (rest-hook's agent, places per origin and OAuth).
 */
export type Channel<Context extends ChannelContext = ChannelContext> = {
  type: ChannelType;
  /**
   * Sends `notification` to `target`. `signal` is the job's: a graceful
   * shutdown that outlasts graphile-worker's patience aborts the send, and
   * ShutdownAbort is thrown (the send is not recorded and goes again).
   */
  send(context: Context, target: ChannelTarget, notification: Notification, signal?: AbortSignal): Promise<CallResult>;
  receivers: Receivers;
  /** Whether its sends are paced by the sender's pacer (calls a second): a call is; a write to the database is not. */
  paced: boolean;
  /** Whether only a topic-based subscription (Backport IG) may use it; a classic one keeps the specification's rest-hook. */
  topicOnly: boolean;
  /**
   * A channel R4 has no code for (the Backport IG's custom channels): its
   * Subscription.channel.type is `r4Type`, and the backport-channel-type
   * extension on it (channel._type) carries this channel's type as a code of
   * the service's own system (src/channels/registry.ts). Absent for rest-hook
   * and websocket, whose types are R4's own codes.
   */
  custom?: { r4Type: string };
  /**
   * The largest notification its receiver takes, in bytes of its JSON body,
   * when it has a limit (a NATS server's max_payload): a topic-based
   * subscription's run of events whose notification is larger is sent as
   * smaller runs (src/dispatch/events/delivery/build.ts). Undefined when it
   * has none, or none is known yet.
   */
  maxBodyBytes?(context: Context, target: ChannelTarget): Promise<number | undefined>;
  /** Why a request's endpoint may not be used, beyond what the element checks (the operator's brokers); undefined when it may. */
  endpointRefusal?(endpoint: string, settings: { brokers: Brokers }): string | undefined;
  /**
   * The Subscription.channel it accepts (type, endpoint, payload, header):
   * what a request is checked against (src/subscriptions/requests.ts) and
   * what /docs describes (src/api/schemas.ts), one schema for both. Its
   * refusals name the element; the extensions on it are read by the request.
   */
  element: z.ZodObject;
};

/**
 * A send cut short because this worker is shutting down: not the subscriber's
 * failure, and not recorded. The handshake and reactivation tasks let it
 * through: graphile-worker counts the job failed and runs it again after its
 * backoff (in another worker process, or here after the restart). A
 * notification claim catches it and leaves what it did not deliver pending.
 */
export class ShutdownAbort extends Error {
  override name = 'ShutdownAbort';
}
