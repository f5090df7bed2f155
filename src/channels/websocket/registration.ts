import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { sql } from 'kysely';
import type { Logger } from 'pino';
import type { Db } from '../../db/database.ts';
import type { Client } from './client.ts';
import { notificationKeptSeconds, websocketNotificationsChannel } from './channel.ts';
import type { DispatchParts } from './dispatch-parts.ts';

export type Registration = ReturnType<typeof createRegistration>;

/** The name the server registers as in webhook.worker_pools: one per API process and server. */
export function newServerId(): string {
  return `websocket-server:${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
}

/**
 * The server in the database: registered in webhook.worker_pools (kind
 * websocket-server) with its bindings kept true at each beat, LISTENing for
 * notifications (each one `notified`) and polling every second (`polled`).
 * All of it is started by the first bind: an API no client uses opens no connection for it.
 */
export function createRegistration({
  db,
  dispatch,
  serverId,
  clients,
  logger,
  isClosing,
  notified,
  polled,
}: {
  db: Db;
  dispatch: DispatchParts;
  serverId: string;
  clients: ReadonlySet<Client>;
  logger: Pick<Logger, 'warn'>;
  isClosing: () => boolean;
  notified: (subscriptionId?: string) => void;
  polled: () => void;
}) {
  /**
   * At each beat: the server's bindings as its clients hold them (rows of
   * clients gone, a delete lost with a connection, are deleted; rows a sweep
   * deleted, this process taken for dead during a database outage, are
   * written again), and the notifications past their minute, of any
   * subscription (a sender deletes its own subscription's as it publishes;
   * these are those of subscriptions gone quiet).
   */
  const keepBindingsTrue = async () => {
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
  };

  // Registration, listener and poll: started by the first bind.
  let started: Promise<{ registration: { stop(): Promise<void> }; listener: { close(): Promise<void> }; poll: NodeJS.Timeout }> | undefined;
  const start = () =>
    (started ??= (async () => {
      const registration = await dispatch.register(serverId, keepBindingsTrue);
      const listener = dispatch.listen(
        websocketNotificationsChannel,
        'fhir-webhooks websocket listener',
        (subscriptionId) => notified(subscriptionId),
        () => isClosing(),
      );
      const poll = setInterval(() => polled(), 1_000);
      poll.unref();
      return { registration, listener, poll };
    })());

  const stop = async () => {
    const running = await started?.catch(() => undefined);
    if (running !== undefined) {
      clearInterval(running.poll);
      await running.listener.close();
      // Its bindings go with its registration (the foreign key).
      await running.registration.stop().catch((error: unknown) => logger.warn({ err: error }, 'could not end the websocket server registration'));
    }
  };

  return { start, stop };
}
