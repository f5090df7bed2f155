import type { WebsocketLimits } from '../../config/index.ts';
import { refusals, type Refusal } from './messages.ts';

/**
 * The decisions the websocket limits (WEBSOCKET_*, src/config/) make about a
 * connection, from counts and clocks the server keeps: whom to take, whom to
 * close, whom to ping.
 */

/**
 * Whether a new connection is taken: refused while the service stops, past
 * WEBSOCKET_MAX_CONNECTIONS clients (`connections` counts it), or past
 * WEBSOCKET_MAX_UNBOUND_PER_ADDRESS unbound clients of its address (`unboundFromAddress` counts it too).
 */
export function admissionRefusal(
  limits: Pick<WebsocketLimits, 'maxConnections' | 'maxUnboundPerAddress'>,
  { closing, connections, unboundFromAddress }: { closing: boolean; connections: number; unboundFromAddress: () => number },
): Refusal | undefined {
  if (closing) return refusals.stopping;
  if (connections > limits.maxConnections) {
    return {
      reason: 'server-full',
      code: 1013,
      text: `This server holds ${limits.maxConnections} websocket clients, the most WEBSOCKET_MAX_CONNECTIONS allows: try again later`,
    };
  }
  // Counted with this one: it has nothing bound yet.
  if (unboundFromAddress() > limits.maxUnboundPerAddress) {
    return {
      reason: 'server-full',
      code: 1013,
      text: `This address has ${limits.maxUnboundPerAddress} websocket connections with nothing bound, the most WEBSOCKET_MAX_UNBOUND_PER_ADDRESS allows: bind them first`,
    };
  }
  return undefined;
}

/** A connection that bound nothing within WEBSOCKET_BIND_TIMEOUT_SECONDS of connecting. */
export function bindTimeoutRefusal(limits: Pick<WebsocketLimits, 'bindTimeoutMs'>): Refusal {
  return {
    reason: 'idle',
    code: 1000,
    text: `Nothing bound within ${Math.round(limits.bindTimeoutMs / 1000)} s of connecting: send bind-with-token <token> at once`,
  };
}

/** Whether a bind is refused: the API key's tokens already bound WEBSOCKET_MAX_CONNECTIONS_PER_KEY other connections. */
export function keyLimitRefusal(limits: Pick<WebsocketLimits, 'maxConnectionsPerKey'>, otherConnectionsOfKey: number): Refusal | undefined {
  if (otherConnectionsOfKey < limits.maxConnectionsPerKey) return undefined;
  return {
    reason: 'key-limit',
    code: 1008,
    text: `This API key has ${otherConnectionsOfKey} websocket clients bound, the most WEBSOCKET_MAX_CONNECTIONS_PER_KEY allows`,
  };
}

/** What the idle check does with a connection at `now`. */
export type IdleVerdict =
  /** Nothing bound for the idle timeout: refused with these words. */
  | { close: Refusal }
  /** Bound, but no pong for the idle timeout: cut off without words. */
  | { terminate: true }
  /** Bound and answering: pinged (if its socket is open). */
  | { ping: true }
  /** Unbound for less than the idle timeout: left alone. */
  | undefined;

/** What the idle check (connections.ts) does with a client: closed when unbound or silent for the idle timeout, else pinged if bound. */
export function idleVerdict(
  limits: Pick<WebsocketLimits, 'idleTimeoutMs'>,
  client: { idleSince: number | undefined; lastPongAt: number },
  now: number,
): IdleVerdict {
  if (client.idleSince !== undefined && now - client.idleSince >= limits.idleTimeoutMs) {
    return {
      close: {
        reason: 'idle',
        code: 1000,
        text: `Nothing bound for ${Math.round(limits.idleTimeoutMs / 1000)} s: send bind-with-token <token> after connecting`,
      },
    };
  }
  if (client.idleSince === undefined && now - client.lastPongAt >= limits.idleTimeoutMs) return { terminate: true };
  if (client.idleSince === undefined) return { ping: true };
  return undefined;
}

/** How often the idle check runs: four times per idle timeout, and no more often than every 250 ms. */
export function idleCheckIntervalMs(limits: Pick<WebsocketLimits, 'idleTimeoutMs'>): number {
  return Math.max(250, Math.floor(limits.idleTimeoutMs / 4));
}
