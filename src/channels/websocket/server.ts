import type { Logger } from 'pino';
import type { WebSocket } from 'ws';
import type { WebsocketLimits } from '../../config/index.ts';
import type { Db } from '../../db/database.ts';
import type { Metrics } from '../../metrics/metrics.ts';
import { createConnections } from './connections.ts';
import type { DispatchParts } from './dispatch-parts.ts';
import { createEndedBindingsCheck } from './ended-bindings.ts';
import { createProtocol } from './protocol.ts';
import { createRegistration, newServerId } from './registration.ts';
import { createRelay } from './relay.ts';
import { createSending } from './sending.ts';

/**
 * The websocket server of an API process: the clients of the websocket
 * channel (src/channels/websocket/channel.ts says how the two halves meet). A client
 * connects to WEBSOCKET_PATH, sends `bind-with-token <token>` with a token from
 * $get-ws-binding-token, and gets a handshake per subscription the token
 * binds (with its latest event number), then the notifications of those
 * subscriptions numbered after it, as text frames, in number order. A
 * refusal (an unknown, used or expired token, a malformed message, a limit)
 * is an OperationOutcome frame, then the close: nothing else is sent.
 *
 * Medplum's client is understood too: its JSON bind, its keepalive
 * `{"type":"ping"}` (answered `{"type":"pong"}`, as Medplum's server does)
 * and `{"type":"unbind-from-token","payload":{"token":…}}`, which stops
 * sending the subscriptions that token bound on this connection.
 *
 * A connection must bind within WEBSOCKET_BIND_TIMEOUT_SECONDS, and one
 * address holds at most WEBSOCKET_MAX_UNBOUND_PER_ADDRESS connections with
 * nothing bound: a bind takes an API key's token, a connection nothing.
 */

export type WebsocketServerOptions = {
  db: Db;
  /** Public base URL, without a trailing slash. */
  baseUrl: string;
  limits: WebsocketLimits;
  metrics: Metrics;
  logger: Pick<Logger, 'info' | 'warn' | 'debug'>;
  dispatch: DispatchParts;
};

export type WebsocketServer = {
  /** Takes a new client (the upgrade done). */
  accept(socket: WebSocket, clientAddress: string): void;
  /** A message or socket error ws reported on a client (a message over the size limit). */
  failed(socket: WebSocket, error: Error): void;
  /** Closes every client (1001) and ends the server's registration. */
  close(): Promise<void>;
};

/**
 * The websocket server of an API process. It registers in
 * webhook.worker_pools (kind websocket-server) and LISTENs for notifications
 * only once a client binds: an API no client uses opens no connection for it.
 */
export function createWebsocketServer({ db, baseUrl, limits, metrics, logger, dispatch }: WebsocketServerOptions): WebsocketServer {
  const serverId = newServerId();
  let closing = false;
  const isClosing = () => closing;
  const sending = createSending({ limits, metrics, logger });
  const relay = createRelay({ db, logger, send: sending.send, isClosing });
  const connections = createConnections({ limits, metrics, logger, sending, isClosing, forget: relay.forget });
  const endEndedBindings = createEndedBindingsCheck({ db, serverId, clients: connections.clients, relay, sending, logger });
  const registration = createRegistration({
    db,
    dispatch,
    serverId,
    clients: connections.clients,
    logger,
    isClosing,
    notified: (subscriptionId) => relay.wake(subscriptionId),
    polled: () => {
      relay.wake();
      void endEndedBindings();
    },
  });
  const protocol = createProtocol({ db, baseUrl, limits, logger, dispatch, serverId, sending, relay, start: registration.start, isClosing });

  return {
    accept(socket, clientAddress) {
      const client = connections.accept(socket, clientAddress);
      if (client !== undefined) protocol.listen(client);
    },
    failed: (socket, error) => connections.failed(socket, error),
    async close() {
      closing = true;
      connections.closeAll();
      await registration.stop();
    },
  };
}
