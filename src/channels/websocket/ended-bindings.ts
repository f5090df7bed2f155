import { sql } from 'kysely';
import type { Logger } from 'pino';
import type { Db } from '../../db/database.ts';
import type { Client } from './client.ts';
import { bindingEnded } from './messages.ts';
import type { Relay } from './relay.ts';
import type { Sending } from './sending.ts';

/** Bindings of subscriptions switched off, or of revoked keys: the client is told, and closed when nothing is left bound. */
export function createEndedBindingsCheck({
  db,
  serverId,
  clients,
  relay,
  sending,
  logger,
}: {
  db: Db;
  serverId: string;
  clients: ReadonlySet<Client>;
  relay: Relay;
  sending: Sending;
  logger: Pick<Logger, 'warn'>;
}): () => Promise<void> {
  return async () => {
    if (!relay.followsAny()) return;
    try {
      const { rows } = await sql<{ subscription_id: string; connection_id: string; off: boolean }>`
        SELECT b.subscription_id, b.connection_id, s.status = 'off' AS off
        FROM webhook.websocket_bindings b
        JOIN webhook.subscriptions s ON s.id = b.subscription_id
        JOIN webhook.api_keys k ON k.id = b.api_key_id
        WHERE b.server_id = ${serverId} AND (s.status = 'off' OR k.revoked_at IS NOT NULL)`.execute(db);
      for (const row of rows) {
        const client = [...clients].find((candidate) => candidate.id === row.connection_id);
        if (client === undefined || !client.bound.has(row.subscription_id)) continue;
        relay.unfollow(client, row.subscription_id);
        const ended = bindingEnded(row.subscription_id, row.off, client.bound.size === 0);
        if (ended.closes) sending.refuse(client, ended);
        else sending.tell(client, ended.text);
        await sql`DELETE FROM webhook.websocket_bindings WHERE subscription_id = ${row.subscription_id} AND connection_id = ${row.connection_id}`.execute(db);
      }
    } catch (error) {
      logger.warn({ err: error }, 'could not check the websocket bindings');
    }
  };
}
