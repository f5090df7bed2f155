import type { Logger } from 'pino';
import { WebSocket } from 'ws';
import type { WebsocketLimits } from '../../config/index.ts';
import type { Metrics } from '../../metrics/metrics.ts';
import { newClient, type Client } from './client.ts';
import { admissionRefusal, bindTimeoutRefusal, idleCheckIntervalMs, idleVerdict } from './limits.ts';
import type { Sending } from './sending.ts';

export type Connections = ReturnType<typeof createConnections>;

/**
 * The clients of the server and their limits: how many it takes (per process
 * and unbound per address), the bind deadline, the idle timeout and the pings.
 * A closed client is handed to `forget`, which ends its bindings.
 */
export function createConnections({
  limits,
  metrics,
  logger,
  sending,
  isClosing,
  forget,
}: {
  limits: WebsocketLimits;
  metrics: Metrics;
  logger: Pick<Logger, 'info' | 'debug'>;
  sending: Sending;
  isClosing: () => boolean;
  forget: (client: Client) => void;
}) {
  const clients = new Set<Client>();
  const bySocket = new WeakMap<WebSocket, Client>();
  metrics.countWebsocketConnections(() => {
    let bound = 0;
    for (const client of clients) if (client.bound.size > 0) bound += 1;
    return { bound, unbound: clients.size - bound };
  });

  const closed = (client: Client) => {
    if (!clients.delete(client)) return;
    clearTimeout(client.bindDeadline);
    sending.end(client, 'client');
    forget(client);
  };

  // Idle clients: none bound for the idle timeout, or no pong for as long; the others are pinged.
  const idle = setInterval(() => {
    const now = Date.now();
    for (const client of clients) {
      if (client.endedBy !== undefined) continue;
      const verdict = idleVerdict(limits, client, now);
      if (verdict === undefined) continue;
      if ('close' in verdict) sending.refuse(client, verdict.close);
      else if ('terminate' in verdict) {
        logger.info({ connection: client.id, address: client.address }, 'closed a websocket client that did not answer pings');
        sending.end(client, 'idle');
        client.socket.terminate();
      } else if (client.socket.readyState === WebSocket.OPEN) client.socket.ping();
    }
  }, idleCheckIntervalMs(limits));
  idle.unref();

  /** The clients of an address that have nothing bound (and are not being closed). */
  const unboundFrom = (address: string) => {
    let unbound = 0;
    for (const client of clients) if (client.address === address && client.bound.size === 0 && client.endedBy === undefined) unbound += 1;
    return unbound;
  };

  return {
    clients: clients as ReadonlySet<Client>,
    /** Takes a new client, or refuses it past a limit (then undefined); a client taken must bind before its deadline. */
    accept(socket: WebSocket, clientAddress: string): Client | undefined {
      const client = newClient(socket, clientAddress);
      clients.add(client);
      bySocket.set(socket, client);
      socket.on('close', () => closed(client));
      socket.on('pong', () => (client.lastPongAt = Date.now()));
      const refusal = admissionRefusal(limits, { closing: isClosing(), connections: clients.size, unboundFromAddress: () => unboundFrom(clientAddress) });
      if (refusal !== undefined) {
        sending.refuse(client, refusal);
        return undefined;
      }
      client.bindDeadline = setTimeout(() => sending.refuse(client, bindTimeoutRefusal(limits)), limits.bindTimeoutMs);
      client.bindDeadline.unref();
      return client;
    },
    /** A message or socket error ws reported on a client (a message over the size limit). */
    failed(socket: WebSocket, error: Error) {
      const client = bySocket.get(socket);
      if (client === undefined) return;
      const tooLarge = (error as { code?: string }).code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH';
      // ws closes the connection itself (1009 for a message over the limit).
      sending.end(client, tooLarge ? 'too-large' : 'client');
      logger.debug({ err: error, connection: client.id }, 'websocket client error');
    },
    /** Every client told the service is stopping (1001), and no longer checked for idleness. */
    closeAll() {
      clearInterval(idle);
      for (const client of clients) {
        sending.end(client, 'shutdown');
        client.socket.close(1001, 'The service is stopping');
      }
    },
  };
}
