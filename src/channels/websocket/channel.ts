import { sql } from 'kysely';
import { z } from 'zod';
import type { Db } from '../../db/database.ts';
import { ShutdownAbort, type Channel, type ConnectedClient } from '../channel.ts';
import { absent, payload } from '../element.ts';

/**
 * The websocket channel (FHIR Subscriptions Backport IG, channel type
 * websocket). Its two halves meet in the database:
 *
 * - `websocket`, the channel behind the sender (src/channels/channel.ts): a
 *   worker that claimed a websocket subscription's events numbers them, builds
 *   each notification at the subscription's payload level, and "sends" it by
 *   writing it once to webhook.websocket_notifications, with a NOTIFY, when
 *   clients are bound (webhook.websocket_bindings), whichever API process
 *   holds them. The event is then delivered: the log is the channel's record,
 *   and a client that was not bound, or missed a frame, reads it there with
 *   $events (the IG's recovery path).
 * - the websocket server of an API process (src/channels/websocket/server.ts): it takes
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

/** Where the API takes websocket clients, on its own port (src/api/routes/websocket.ts). */
export const websocketPath = '/fhir/websocket';

/** The websocket URL of a service at `baseUrl` (http becomes ws, https wss): $get-ws-binding-token's websocket-url. */
export function websocketUrl(baseUrl: string): string {
  return `${baseUrl.replace(/^http/, 'ws')}${websocketPath}`;
}

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
  type: 'websocket',
  receivers: { at: 'service', url: websocketUrl, connected: boundClients },
  // A websocket send is a write to the database, not a call to pace.
  paced: false,
  topicOnly: true,
  // No endpoint (its clients connect to the service and bind with $get-ws-binding-token's token), no headers (nothing is
  // called); the channel's extensions about calls to an endpoint are refused by the request (src/subscriptions/requests.ts).
  element: z.object({
    type: z.literal('websocket'),
    endpoint: absent(
      "channel.endpoint is for rest-hook: a websocket subscription's clients connect to the service (the websocket-url of $get-ws-binding-token)",
    ),
    payload,
    header: absent('channel.header is sent with rest-hook calls; a websocket subscription has none (its clients authenticate with a binding token)'),
  }),
  async send(context, target, { body, type, lastEventNumber }, signal) {
    if (signal?.aborted) throw new ShutdownAbort('the websocket notification was not published: the worker is shutting down; it goes again');
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
        responseExcerpt:
          clients === 0
            ? 'no websocket client bound: the notification stays in the log ($events)'
            : `published to ${clients} bound websocket client${clients === 1 ? '' : 's'}`,
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

/** A websocket subscription's bound clients, oldest first, whichever API process holds them. */
async function boundClients(db: Db, subscriptionId: string): Promise<ConnectedClient[]> {
  const rows = await db
    .selectFrom('webhook.websocket_bindings')
    .select(['connection_id', 'client_address', 'server_id', 'bound_at'])
    .where('subscription_id', '=', subscriptionId)
    .orderBy('bound_at')
    .orderBy('connection_id')
    .execute();
  return rows.map((row) => ({ connection: row.connection_id, address: row.client_address, server: row.server_id, boundAt: row.bound_at.toISOString() }));
}
