import { sql } from 'kysely';
import { ShutdownAbort, type Channel } from './channel.ts';

/**
 * The websocket channel (FHIR Subscriptions Backport IG, channel type
 * websocket). Its two halves meet in the database:
 *
 * - `websocket`, the channel behind the sender (src/dispatch/channel.ts): a
 *   worker that claimed a websocket subscription's events numbers them, builds
 *   each notification at the subscription's payload level, and "sends" it by
 *   writing it once to webhook.websocket_notifications, with a NOTIFY, when
 *   clients are bound (webhook.websocket_bindings), whichever API process
 *   holds them. The event is then delivered: the log is the channel's record,
 *   and a client that was not bound, or missed a frame, reads it there with
 *   $events (the IG's recovery path).
 * - the websocket server of an API process (src/api/websocket-server.ts): it takes
 *   the clients, binds them with $get-ws-binding-token's tokens, sends each a
 *   handshake per subscription with the latest event number, and writes to
 *   each client the notifications of its subscriptions numbered after that
 *   handshake, woken by the NOTIFY (or its poll each second).
 *
 * No event is lost between a bind and the first notification: the bind
 * commits its rows before it reads the latest number, so an event numbered
 * after that read is sent (and written for this server's clients) after the
 * rows are visible; an event numbered before it is in the handshake's count.
 */

/** What a websocket send tells the API processes: the subscription, in the payload. */
export const websocketNotificationsChannel = 'webhook_websocket_notifications';

/** How long a notification waits for the API processes to read it: the log is the record. */
export const notificationKeptSeconds = 60;

/**
 * The websocket channel: hands the notification to the API processes holding
 * the subscription's bound clients (none bound: nothing to hand over, and the
 * event stays in the log for $events). Delivered when written; retryable when
 * the database would not take it.
 */
export const websocket: Channel = {
  async send(context, target, { body, type, lastEventNumber }, signal) {
    if (signal?.aborted) throw new ShutdownAbort("the websocket notification was not published: the worker is shutting down; it goes again");
    const startedAt = new Date();
    const started = performance.now();
    try {
      const { rows } = await sql<{ clients: number }>`
        WITH bound AS (
          SELECT count(*)::int AS clients FROM webhook.websocket_bindings WHERE subscription_id = ${target.id}
        ), expired AS (
          DELETE FROM webhook.websocket_notifications
          WHERE subscription_id = ${target.id} AND published_at < now() - make_interval(secs => ${notificationKeptSeconds})
        ), published AS (
          INSERT INTO webhook.websocket_notifications (subscription_id, notification_type, last_event_number, body)
          SELECT ${target.id}, ${type}, ${lastEventNumber}, ${JSON.stringify(body)} FROM bound WHERE clients > 0
          RETURNING subscription_id
        )
        SELECT bound.clients, (SELECT count(pg_notify(${websocketNotificationsChannel}, published.subscription_id::text)) FROM published) AS notified
        FROM bound`.execute(context.db);
      const clients = rows[0]?.clients ?? 0;
      return {
        verdict: 'delivered',
        httpStatus: undefined,
        error: undefined,
        responseExcerpt: clients === 0 ? 'no websocket client bound: the notification stays in the log ($events)' : `published to ${clients} bound websocket client${clients === 1 ? '' : 's'}`,
        retryAfterSeconds: undefined,
        startedAt,
        durationMs: Math.round(performance.now() - started),
      };
    } catch (error) {
      return {
        verdict: 'retryable',
        httpStatus: undefined,
        error: `the websocket notification could not be published: ${error instanceof Error ? error.message : String(error)}`,
        responseExcerpt: undefined,
        retryAfterSeconds: undefined,
        startedAt,
        durationMs: Math.round(performance.now() - started),
      };
    }
  },
};
