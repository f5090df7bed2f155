import { randomUUID } from 'node:crypto';
import type { WebSocket } from 'ws';
import type { WebsocketCloseReason, WebsocketFrameType } from '../../metrics/metrics.ts';

/** A notification read for the clients: its type, the highest event number it tells (null: none), its text. */
export type Frame = { type: Exclude<WebsocketFrameType, 'error'>; lastEventNumber: number | null; body: string };

/** A connection of the websocket server: its socket and what it has bound. */
export type Client = {
  id: string;
  socket: WebSocket;
  address: string;
  /** Since when it has had no subscription bound (undefined while it has some). */
  idleSince: number | undefined;
  /** Closes it unless a bind came first: from its connection, WEBSOCKET_BIND_TIMEOUT_SECONDS. */
  bindDeadline: NodeJS.Timeout | undefined;
  /** The subscriptions each of its binds named, by its token's digest: what an unbind-from-token with that token ends. */
  tokens: Map<string, string[]>;
  lastPongAt: number;
  /**
   * Its subscriptions, each with the key whose token bound it, and the event number of its
   * handshake, or the frames that came while it is being bound.
   */
  bound: Map<string, { apiKeyId: string } & ({ after: number } | { binding: Frame[] })>;
  /** Its messages, handled one after the other. */
  work: Promise<void>;
  /** Why the server ended it, once it did (the close is then not the client's). */
  endedBy: WebsocketCloseReason | undefined;
};

/** A client just connected: nothing bound, idle from now. */
export function newClient(socket: WebSocket, address: string): Client {
  return {
    id: randomUUID(),
    socket,
    address,
    idleSince: Date.now(),
    bindDeadline: undefined,
    tokens: new Map(),
    lastPongAt: Date.now(),
    bound: new Map(),
    work: Promise.resolve(),
    endedBy: undefined,
  };
}
