import type { Logger } from 'pino';
import type { Db } from '../../db/database.ts';
import { deleteBindings, endedBindings } from './bindings.ts';
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
      const rows = await endedBindings(db, serverId);
      for (const row of rows) {
        const client = [...clients].find((candidate) => candidate.id === row.connection_id);
        if (client === undefined || !client.bound.has(row.subscription_id)) continue;
        relay.unfollow(client, row.subscription_id);
        const ended = bindingEnded(row.subscription_id, row.off, client.bound.size === 0);
        if (ended.closes) sending.refuse(client, ended);
        else sending.tell(client, ended.text);
        await deleteBindings(db, row.connection_id, [row.subscription_id]);
      }
    } catch (error) {
      logger.warn({ err: error }, 'could not check the websocket bindings');
    }
  };
}
