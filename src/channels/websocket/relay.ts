import { sql } from 'kysely';
import type { Logger } from 'pino';
import type { Db } from '../../db/database.ts';
import { deleteBindings } from './bindings.ts';
import type { Client, Frame } from './client.ts';
import type { Sending } from './sending.ts';

/** A subscription some client of this server is bound to: the last notification read for it (undefined until the first bind has read where to start). */
type Followed = { readUpTo: string | undefined; clients: Set<Client> };

export type Relay = ReturnType<typeof createRelay>;

/**
 * The notifications of webhook.websocket_notifications relayed to the clients
 * bound to their subscriptions: woken by the LISTEN (a subscription) or the
 * poll (all of them), each client sent those numbered after its handshake.
 */
export function createRelay({ db, logger, send, isClosing }: { db: Db; logger: Pick<Logger, 'warn'>; send: Sending['send']; isClosing: () => boolean }) {
  const followed = new Map<string, Followed>();

  // Reading the notifications: one read at a time, for the subscriptions woken (all of them on a poll).
  let reading = false;
  let wantAll = false;
  const wanted = new Set<string>();
  const wake = (subscriptionId?: string) => {
    if (subscriptionId === undefined) wantAll = true;
    else if (followed.has(subscriptionId)) wanted.add(subscriptionId);
    if (!reading) void drain();
  };
  const drain = async () => {
    reading = true;
    try {
      while (!isClosing() && (wantAll || wanted.size > 0)) {
        const ids = wantAll ? [...followed.keys()] : [...wanted];
        wantAll = false;
        wanted.clear();
        await readNotifications(ids);
      }
    } catch (error) {
      logger.warn({ err: error }, 'could not read the websocket notifications; trying again in 1 s');
    } finally {
      reading = false;
    }
  };
  const readNotifications = async (ids: string[]) => {
    for (;;) {
      const cursors = ids.flatMap((id) => {
        const readUpTo = followed.get(id)?.readUpTo;
        return readUpTo === undefined ? [] : [{ id, readUpTo }];
      });
      if (cursors.length === 0) return;
      const { rows } = await sql<{ id: string; subscription_id: string; notification_type: Frame['type']; last_event_number: string | null; body: string }>`
        SELECT n.id, n.subscription_id, n.notification_type, n.last_event_number, n.body
        FROM unnest(${cursors.map((cursor) => cursor.id)}::uuid[], ${cursors.map((cursor) => cursor.readUpTo)}::bigint[]) AS f(subscription_id, after)
        CROSS JOIN LATERAL (SELECT * FROM webhook.websocket_notifications n
                            WHERE n.subscription_id = f.subscription_id AND n.id > f.after ORDER BY n.id LIMIT 100) n
        ORDER BY n.id`.execute(db);
      for (const row of rows) {
        const subscription = followed.get(row.subscription_id);
        if (subscription === undefined || subscription.readUpTo === undefined || BigInt(row.id) <= BigInt(subscription.readUpTo)) continue;
        subscription.readUpTo = row.id;
        const frame: Frame = {
          type: row.notification_type,
          lastEventNumber: row.last_event_number === null ? null : Number(row.last_event_number),
          body: row.body,
        };
        for (const client of subscription.clients) deliver(client, row.subscription_id, frame);
      }
      if (rows.length < 100) return;
    }
  };

  /** A notification to a client: queued while it is being bound, left out when its handshake counted it already. */
  const deliver = (client: Client, subscriptionId: string, frame: Frame) => {
    const state = client.bound.get(subscriptionId);
    if (state === undefined) return;
    if ('binding' in state) {
      state.binding.push(frame);
      return;
    }
    if (frame.lastEventNumber !== null && frame.lastEventNumber <= state.after) return;
    send(client, frame.body, frame.type);
  };

  /** The subscriptions a bind names that the client has not bound yet, followed for it (what is read meanwhile waits in `binding`): it is no longer idle. */
  const follow = (client: Client, subscriptionIds: string[], apiKeyId: string) => {
    for (const subscriptionId of subscriptionIds.filter((id) => !client.bound.has(id))) {
      client.bound.set(subscriptionId, { apiKeyId, binding: [] });
      const following = followed.get(subscriptionId) ?? { readUpTo: undefined, clients: new Set<Client>() };
      following.clients.add(client);
      followed.set(subscriptionId, following);
    }
    client.idleSince = undefined;
  };

  /**
   * A bound subscription's numbers known: its notifications are read from `lastNotification` on (unless a
   * bind came first), the handshake is sent, then what came while binding, filtered by `lastEventNumber`.
   */
  const handshaken = (client: Client, subscriptionId: string, numbers: { lastEventNumber: number; lastNotification: string }, handshake: string) => {
    const following = followed.get(subscriptionId);
    if (following !== undefined && following.readUpTo === undefined) following.readUpTo = numbers.lastNotification;
    const state = client.bound.get(subscriptionId);
    const waiting = state !== undefined && 'binding' in state ? state.binding : [];
    if (state !== undefined) client.bound.set(subscriptionId, { apiKeyId: state.apiKeyId, after: numbers.lastEventNumber });
    send(client, handshake, 'handshake');
    for (const frame of waiting) deliver(client, subscriptionId, frame);
    wake(subscriptionId);
  };

  const unfollow = (client: Client, subscriptionId: string) => {
    client.bound.delete(subscriptionId);
    const following = followed.get(subscriptionId);
    following?.clients.delete(client);
    if (following?.clients.size === 0) followed.delete(subscriptionId);
    if (client.bound.size === 0) client.idleSince = Date.now();
  };

  /** A closed client's subscriptions: no longer followed for it, and its bindings' rows deleted (else by the next beat). */
  const forget = (client: Client) => {
    const subscriptions = [...client.bound.keys()];
    for (const subscriptionId of subscriptions) unfollow(client, subscriptionId);
    if (subscriptions.length > 0) {
      deleteBindings(db, client.id, subscriptions).catch((error: unknown) =>
        logger.warn({ err: error, connection: client.id }, 'could not delete the bindings of a closed websocket client; the next beat does'),
      );
    }
  };

  return { wake, follow, handshaken, unfollow, forget, followsAny: () => followed.size > 0 };
}
