import { sql } from 'kysely';
import type { Db } from '../../db/database.ts';
import type { Client } from './client.ts';
import { notificationKeptSeconds } from './channel.ts';

/**
 * The server's rows of webhook.websocket_bindings (a subscription bound on a
 * connection, by an API key), which the senders publish by, and what a binding
 * starts from: the websocket server's SQL, but for its reading of the
 * notifications (relay.ts) and its redeeming of tokens (binding-tokens.ts).
 */

/** The connections other than `connectionId` that the API key's tokens have bound, on any server. */
export async function otherConnectionsOfKey(db: Db, apiKeyId: string, connectionId: string): Promise<number> {
  const { rows } = await sql<{ others: number }>`
    SELECT count(DISTINCT connection_id)::int AS others FROM webhook.websocket_bindings
    WHERE api_key_id = ${apiKeyId} AND connection_id <> ${connectionId}`.execute(db);
  return rows[0]?.others ?? 0;
}

export async function insertBindings(db: Db, serverId: string, client: Client, apiKeyId: string, subscriptionIds: string[]): Promise<void> {
  await db
    .insertInto('webhook.websocket_bindings')
    .values(
      subscriptionIds.map((subscriptionId) => ({
        subscription_id: subscriptionId,
        connection_id: client.id,
        server_id: serverId,
        api_key_id: apiKeyId,
        client_address: client.address,
      })),
    )
    .onConflict((conflict) => conflict.columns(['subscription_id', 'connection_id']).doNothing())
    .execute();
}

export async function deleteBindings(db: Db, connectionId: string, subscriptionIds: string[]): Promise<void> {
  await sql`DELETE FROM webhook.websocket_bindings WHERE subscription_id = ANY (${subscriptionIds}::uuid[]) AND connection_id = ${connectionId}`.execute(db);
}

/** Where each subscription's binding starts: its latest event number, and its latest notification (null: none kept). */
export async function bindingStarts(db: Db, subscriptionIds: string[]): Promise<{ id: string; last_event_number: string; last_notification: string | null }[]> {
  const { rows } = await sql<{ id: string; last_event_number: string; last_notification: string | null }>`
    SELECT stream.subscription_id AS id, webhook.last_event_number(stream.subscription_id) AS last_event_number,
           (SELECT max(n.id) FROM webhook.websocket_notifications n WHERE n.subscription_id = stream.subscription_id) AS last_notification
    FROM webhook.subscription_streams stream
    WHERE stream.subscription_id = ANY (${subscriptionIds}::uuid[])`.execute(db);
  return rows;
}

/** The server's bindings whose subscription was switched off (`off`), or whose API key was revoked. */
export async function endedBindings(db: Db, serverId: string): Promise<{ subscription_id: string; connection_id: string; off: boolean }[]> {
  const { rows } = await sql<{ subscription_id: string; connection_id: string; off: boolean }>`
    SELECT b.subscription_id, b.connection_id, s.status = 'off' AS off
    FROM webhook.websocket_bindings b
    JOIN webhook.subscriptions s ON s.id = b.subscription_id
    JOIN webhook.api_keys k ON k.id = b.api_key_id
    WHERE b.server_id = ${serverId} AND (s.status = 'off' OR k.revoked_at IS NOT NULL)`.execute(db);
  return rows;
}

/**
 * At each beat: the server's bindings as its clients hold them (rows of
 * clients gone, a delete lost with a connection, are deleted; rows a sweep
 * deleted, this process taken for dead during a database outage, are
 * written again), and the notifications past their minute, of any
 * subscription (a sender deletes its own subscription's as it publishes;
 * these are those of subscriptions gone quiet).
 */
export async function keepBindingsTrue(db: Db, serverId: string, clients: ReadonlySet<Client>): Promise<void> {
  await sql`DELETE FROM webhook.websocket_notifications WHERE published_at < now() - make_interval(secs => ${notificationKeptSeconds})`.execute(db);
  const live = [...clients].flatMap((client) => [...client.bound].map(([subscriptionId, { apiKeyId }]) => ({ client, subscriptionId, apiKeyId })));
  await sql`DELETE FROM webhook.websocket_bindings WHERE server_id = ${serverId} AND NOT (connection_id = ANY (${[...clients].map((client) => client.id)}::uuid[]))`.execute(
    db,
  );
  if (live.length === 0) return;
  await sql`
    INSERT INTO webhook.websocket_bindings (subscription_id, connection_id, server_id, api_key_id, client_address)
    SELECT b.subscription_id, b.connection_id, ${serverId}, b.api_key_id, b.client_address
    FROM unnest(${live.map((item) => item.subscriptionId)}::uuid[], ${live.map((item) => item.client.id)}::uuid[],
                ${live.map((item) => item.apiKeyId)}::uuid[], ${live.map((item) => item.client.address)}::text[])
      AS b(subscription_id, connection_id, api_key_id, client_address)
    JOIN webhook.subscriptions s ON s.id = b.subscription_id
    ON CONFLICT (subscription_id, connection_id) DO NOTHING`.execute(db);
}
