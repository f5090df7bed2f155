import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Logger } from 'pino';
import type { Db } from '../../db/database.ts';
import type { Client } from './client.ts';
import { keepBindingsTrue } from './bindings.ts';
import { websocketNotificationsChannel } from './channel.ts';
import type { DispatchParts } from './dispatch-parts.ts';

export type Registration = ReturnType<typeof createRegistration>;

/** The name the server registers as in webhook.worker_pools: one per API process and server. */
export function newServerId(): string {
  return `websocket-server:${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
}

/**
 * The server in the database: registered in webhook.worker_pools (kind
 * websocket-server) with its bindings kept true at each beat (bindings.ts), LISTENing for
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
  // Registration, listener and poll: started by the first bind.
  let started: Promise<{ registration: { stop(): Promise<void> }; listener: { close(): Promise<void> }; poll: NodeJS.Timeout }> | undefined;
  const start = () =>
    (started ??= (async () => {
      const registration = await dispatch.register(serverId, () => keepBindingsTrue(db, serverId, clients));
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
