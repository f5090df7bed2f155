import type { CallContext, Target } from './delivery.ts';
import type { CallResult } from './outbound.ts';

/**
 * A channel is how a notification leaves the service: rest-hook (an HTTP POST
 * to the subscriber's endpoint, src/dispatch/outbound.ts) or websocket (the
 * clients bound to the subscription, src/dispatch/websocket.ts). Everything
 * before and after is the same whatever the channel: the event log, its
 * numbering, claims, retries and states, what a notification holds (its
 * payload level, how many events). A channel only sends one notification to
 * one subscription and says what happened, as a CallResult: delivered,
 * retryable or permanent, which the sender records and acts on.
 */

/** Where the API takes websocket clients, on its own port (src/api/routes/websocket.ts). */
export const websocketPath = '/fhir/websocket';

/** The websocket URL of a service at `baseUrl` (http becomes ws, https wss): $get-ws-binding-token's websocket-url. */
export function websocketUrl(baseUrl: string): string {
  return `${baseUrl.replace(/^http/, 'ws')}${websocketPath}`;
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

export type Channel = {
  /**
   * Sends `notification` to `target`. `signal` is the job's: a graceful
   * shutdown that outlasts graphile-worker's patience aborts the send, and
   * ShutdownAbort is thrown (the send is not recorded and goes again).
   */
  send(context: CallContext, target: Target, notification: Notification, signal?: AbortSignal): Promise<CallResult>;
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
