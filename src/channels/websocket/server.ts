import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { sql } from 'kysely';
import type { Logger } from 'pino';
import { WebSocket } from 'ws';
import type { WebsocketLimits } from '../../config/index.ts';
import type { Db } from '../../db/database.ts';
import type { FhirResource } from '../../db/schema.ts';
import { operationOutcome } from '../../fhir/outcome.ts';
import type { Metrics, WebsocketCloseReason, WebsocketFrameType } from '../../metrics/metrics.ts';
import { notificationBundle, statusParameters } from '../../topics/notification.ts';
import { redeemBindingToken, tokenDigest, type BoundSubscription } from './binding-tokens.ts';
import { notificationKeptSeconds, websocketNotificationsChannel } from './channel.ts';

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

/**
 * What the server uses of the processes' registry and of the event log,
 * which live above the channels (src/dispatch/): the API process gives them
 * (src/api/app.ts).
 */
export type DispatchParts = {
  /**
   * Registers the server in webhook.worker_pools as `serverId` (kind
   * websocket-server), running `beat` at each of its beats, until stop()
   * (src/dispatch/liveness.ts).
   */
  register(serverId: string, beat: () => Promise<void>): Promise<{ stop(): Promise<void> }>;
  /** LISTENs on a connection of its own (not through a transaction-mode pooler) to `channel`, until close() (src/dispatch/events/sender.ts). */
  listen(channel: string, applicationName: string, notified: (payload?: string) => void, stopping: () => boolean): { close(): Promise<void> };
  /** The number of a subscription's latest event, its missed events numbered first (src/db/sql/number-missed-events.ts). */
  numberMissedEvents(subscriptionId: string): Promise<number>;
};

export type WebsocketServer = {
  /** Takes a new client (the upgrade done). */
  accept(socket: WebSocket, clientAddress: string): void;
  /** A message or socket error ws reported on a client (a message over the size limit). */
  failed(socket: WebSocket, error: Error): void;
  /** Closes every client (1001) and ends the server's registration. */
  close(): Promise<void>;
};

/** A notification read for the clients: its type, the highest event number it tells (null: none), its text. */
type Frame = { type: Exclude<WebsocketFrameType, 'error'>; lastEventNumber: number | null; body: string };

type Client = {
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

/** A subscription some client of this server is bound to: the last notification read for it (undefined until the first bind has read where to start). */
type Followed = { readUpTo: string | undefined; clients: Set<Client> };

/** What answers a client's keepalive ping (Medplum's server's words). */
const pong = JSON.stringify({ type: 'pong' });

/** The longest close reason a close frame carries (125 bytes, less the code). */
const maxCloseReasonBytes = 123;

/**
 * The websocket server of an API process. It registers in
 * webhook.worker_pools (kind websocket-server) and LISTENs for notifications
 * only once a client binds: an API no client uses opens no connection for it.
 */
export function createWebsocketServer({ db, baseUrl, limits, metrics, logger, dispatch }: WebsocketServerOptions): WebsocketServer {
  const serverId = `websocket-server:${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  const clients = new Set<Client>();
  const bySocket = new WeakMap<WebSocket, Client>();
  const followed = new Map<string, Followed>();
  let closing = false;
  metrics.countWebsocketConnections(() => {
    let bound = 0;
    for (const client of clients) if (client.bound.size > 0) bound += 1;
    return { bound, unbound: clients.size - bound };
  });

  // Registration, listener and poll: started by the first bind.
  let started: Promise<{ registration: { stop(): Promise<void> }; listener: { close(): Promise<void> }; poll: NodeJS.Timeout }> | undefined;
  const start = () =>
    (started ??= (async () => {
      const registration = await dispatch.register(serverId, keepBindingsTrue);
      const listener = dispatch.listen(
        websocketNotificationsChannel,
        'fhir-webhooks websocket listener',
        (subscriptionId) => wake(subscriptionId),
        () => closing,
      );
      const poll = setInterval(() => {
        wake();
        void endEndedBindings();
      }, 1_000);
      poll.unref();
      return { registration, listener, poll };
    })());

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
      while (!closing && (wantAll || wanted.size > 0)) {
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

  /**
   * Writes a frame, unless the client's unsent bytes already pass the bound: it does not read, and is cut off.
   * A notification or refusal is counted by its type; a pong (no type) is not a notification.
   */
  const send = (client: Client, text: string, type: WebsocketFrameType | undefined) => {
    if (client.endedBy !== undefined || client.socket.readyState !== WebSocket.OPEN) return;
    if (client.socket.bufferedAmount > limits.sendBufferBytes) {
      logger.warn(
        { connection: client.id, address: client.address, bufferedBytes: client.socket.bufferedAmount },
        'cut off a websocket client that does not read its notifications',
      );
      end(client, 'slow-client');
      client.socket.terminate();
      return;
    }
    client.socket.send(text);
    if (type !== undefined) metrics.websocketFrameSent(type);
  };

  const end = (client: Client, reason: WebsocketCloseReason) => {
    if (client.endedBy !== undefined) return;
    client.endedBy = reason;
    metrics.websocketClosed(reason);
  };

  /** An error frame (an OperationOutcome saying why), then the close: nothing else is sent. */
  const refuse = (client: Client, reason: WebsocketCloseReason, code: number, text: string) => {
    if (client.endedBy !== undefined) return;
    send(
      client,
      JSON.stringify(operationOutcome(reason === 'token' || reason === 'key-limit' ? 'security' : reason === 'malformed' ? 'invalid' : 'processing', text)),
      'error',
    );
    end(client, reason);
    client.socket.close(code, closeReason(text));
  };

  const bind = async (client: Client, token: string) => {
    const redeemed = await redeemBindingToken(db, token);
    if ('refused' in redeemed) return refuse(client, 'token', 1008, redeemed.refused);
    const { rows: counted } = await sql<{ others: number }>`
      SELECT count(DISTINCT connection_id)::int AS others FROM webhook.websocket_bindings
      WHERE api_key_id = ${redeemed.apiKeyId} AND connection_id <> ${client.id}`.execute(db);
    if ((counted[0]?.others ?? 0) >= limits.maxConnectionsPerKey) {
      return refuse(
        client,
        'key-limit',
        1008,
        `This API key has ${counted[0]!.others} websocket clients bound, the most WEBSOCKET_MAX_CONNECTIONS_PER_KEY allows`,
      );
    }
    await start();
    if (client.endedBy !== undefined) return;
    // Followed before the numbers are read: what is read meanwhile waits in `binding`, filtered once they are known.
    const fresh = redeemed.subscriptions.filter((subscription) => !client.bound.has(subscription.id));
    for (const subscription of fresh) {
      client.bound.set(subscription.id, { apiKeyId: redeemed.apiKeyId, binding: [] });
      const following = followed.get(subscription.id) ?? { readUpTo: undefined, clients: new Set<Client>() };
      following.clients.add(client);
      followed.set(subscription.id, following);
    }
    client.idleSince = undefined;
    await db
      .insertInto('webhook.websocket_bindings')
      .values(
        redeemed.subscriptions.map((subscription) => ({
          subscription_id: subscription.id,
          connection_id: client.id,
          server_id: serverId,
          api_key_id: redeemed.apiKeyId,
          client_address: client.address,
        })),
      )
      .onConflict((conflict) => conflict.columns(['subscription_id', 'connection_id']).doNothing())
      .execute();
    // After the rows committed: an event numbered later is published to this client.
    const { rows } = await sql<{ id: string; last_event_number: string; last_notification: string | null }>`
      SELECT stream.subscription_id AS id, stream.last_event_number,
             (SELECT max(n.id) FROM webhook.websocket_notifications n WHERE n.subscription_id = stream.subscription_id) AS last_notification
      FROM webhook.subscription_streams stream
      WHERE stream.subscription_id = ANY (${redeemed.subscriptions.map((subscription) => subscription.id)}::uuid[])`.execute(db);
    for (const subscription of redeemed.subscriptions) {
      const row = rows.find((candidate) => candidate.id === subscription.id);
      // A subscription out of `active` has its missed events numbered first, as $status counts them.
      const lastEventNumber = subscription.status === 'active' ? Number(row?.last_event_number ?? 0) : await dispatch.numberMissedEvents(subscription.id);
      const following = followed.get(subscription.id);
      if (following !== undefined && following.readUpTo === undefined) following.readUpTo = row?.last_notification ?? '0';
      const state = client.bound.get(subscription.id);
      const waiting = state !== undefined && 'binding' in state ? state.binding : [];
      if (state !== undefined) client.bound.set(subscription.id, { apiKeyId: state.apiKeyId, after: lastEventNumber });
      send(client, JSON.stringify(handshake(subscription, lastEventNumber)), 'handshake');
      for (const frame of waiting) deliver(client, subscription.id, frame);
      wake(subscription.id);
    }
    client.tokens.set(
      tokenDigest(token),
      redeemed.subscriptions.map((subscription) => subscription.id),
    );
    logger.info(
      { connection: client.id, address: client.address, subscriptions: redeemed.subscriptions.map((subscription) => subscription.id) },
      'websocket client bound',
    );
  };

  const handshake = (subscription: BoundSubscription, lastEventNumber: number): FhirResource => {
    const subject = {
      serviceBase: `${baseUrl}/fhir/resources`,
      subscriptionId: subscription.id,
      topicUrl: subscription.topicUrl,
      payloadContent: subscription.payloadContent,
      status: subscription.status,
    };
    return notificationBundle(statusParameters(subject, 'handshake', lastEventNumber, []), subject, []);
  };

  /** Medplum's unbind-from-token: the subscriptions that token bound on this connection are no longer sent to it (their events stay in the log). */
  const unbind = async (client: Client, token: string) => {
    const digest = tokenDigest(token);
    const named = client.tokens.get(digest);
    if (named === undefined) {
      send(
        client,
        JSON.stringify(operationOutcome('informational', 'This token bound nothing on this connection: nothing was unbound', 'information')),
        'error',
      );
      return;
    }
    client.tokens.delete(digest);
    const subscriptions = named.filter((subscriptionId) => client.bound.has(subscriptionId));
    for (const subscriptionId of subscriptions) unfollow(client, subscriptionId);
    if (subscriptions.length > 0)
      await sql`DELETE FROM webhook.websocket_bindings WHERE subscription_id = ANY (${subscriptions}::uuid[]) AND connection_id = ${client.id}`.execute(db);
    logger.info({ connection: client.id, address: client.address, subscriptions }, 'websocket client unbound');
  };

  const handle = async (client: Client, data: Buffer, isBinary: boolean) => {
    if (client.endedBy !== undefined) return;
    if (closing) return refuse(client, 'shutdown', 1001, 'The service is stopping');
    if (isBinary) return refuse(client, 'malformed', 1003, 'Binary frames are not understood: send the text message bind-with-token <token>');
    const message = clientMessageIn(data.toString('utf8'));
    if (message === undefined)
      return refuse(client, 'malformed', 1003, 'Unknown message: send bind-with-token <token>, with a token from $get-ws-binding-token');
    if (message.type === 'ping') {
      client.lastPongAt = Date.now();
      return send(client, pong, undefined);
    }
    if (message.type === 'unbind-from-token') return unbind(client, message.token);
    // Sent in time: a bind that takes longer than the deadline is not cut off.
    clearTimeout(client.bindDeadline);
    await bind(client, message.token);
  };

  /** Bindings of subscriptions switched off, or of revoked keys: the client is told, and closed when nothing is left bound. */
  const endEndedBindings = async () => {
    if (followed.size === 0) return;
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
        const text = row.off
          ? `Subscription/${row.subscription_id} was switched off: nothing more is sent for it`
          : 'The API key that bound this client was revoked';
        unfollow(client, row.subscription_id);
        if (client.bound.size === 0 || !row.off) refuse(client, 'subscription-ended', row.off ? 1000 : 1008, text);
        else send(client, JSON.stringify(operationOutcome('informational', text, 'information')), 'error');
        await sql`DELETE FROM webhook.websocket_bindings WHERE subscription_id = ${row.subscription_id} AND connection_id = ${row.connection_id}`.execute(db);
      }
    } catch (error) {
      logger.warn({ err: error }, 'could not check the websocket bindings');
    }
  };

  const unfollow = (client: Client, subscriptionId: string) => {
    client.bound.delete(subscriptionId);
    const following = followed.get(subscriptionId);
    following?.clients.delete(client);
    if (following?.clients.size === 0) followed.delete(subscriptionId);
    if (client.bound.size === 0) client.idleSince = Date.now();
  };

  const forget = (client: Client) => {
    if (!clients.delete(client)) return;
    clearTimeout(client.bindDeadline);
    end(client, 'client');
    const subscriptions = [...client.bound.keys()];
    for (const subscriptionId of subscriptions) unfollow(client, subscriptionId);
    if (subscriptions.length > 0) {
      sql`DELETE FROM webhook.websocket_bindings WHERE subscription_id = ANY (${subscriptions}::uuid[]) AND connection_id = ${client.id}`
        .execute(db)
        .catch((error: unknown) =>
          logger.warn({ err: error, connection: client.id }, 'could not delete the bindings of a closed websocket client; the next beat does'),
        );
    }
  };

  // Idle clients: none bound for the idle timeout, or no pong for as long; the others are pinged.
  const idle = setInterval(
    () => {
      const now = Date.now();
      for (const client of clients) {
        if (client.endedBy !== undefined) continue;
        if (client.idleSince !== undefined && now - client.idleSince >= limits.idleTimeoutMs) {
          refuse(client, 'idle', 1000, `Nothing bound for ${Math.round(limits.idleTimeoutMs / 1000)} s: send bind-with-token <token> after connecting`);
        } else if (client.idleSince === undefined && now - client.lastPongAt >= limits.idleTimeoutMs) {
          logger.info({ connection: client.id, address: client.address }, 'closed a websocket client that did not answer pings');
          end(client, 'idle');
          client.socket.terminate();
        } else if (client.idleSince === undefined && client.socket.readyState === WebSocket.OPEN) client.socket.ping();
      }
    },
    Math.max(250, Math.floor(limits.idleTimeoutMs / 4)),
  );
  idle.unref();

  /** The clients of an address that have nothing bound (and are not being closed). */
  const unboundFrom = (address: string) => {
    let unbound = 0;
    for (const client of clients) if (client.address === address && client.bound.size === 0 && client.endedBy === undefined) unbound += 1;
    return unbound;
  };

  return {
    accept(socket, clientAddress) {
      const client: Client = {
        id: randomUUID(),
        socket,
        address: clientAddress,
        idleSince: Date.now(),
        bindDeadline: undefined,
        tokens: new Map(),
        lastPongAt: Date.now(),
        bound: new Map(),
        work: Promise.resolve(),
        endedBy: undefined,
      };
      clients.add(client);
      bySocket.set(socket, client);
      socket.on('close', () => forget(client));
      socket.on('pong', () => (client.lastPongAt = Date.now()));
      if (closing) return refuse(client, 'shutdown', 1001, 'The service is stopping');
      if (clients.size > limits.maxConnections)
        return refuse(
          client,
          'server-full',
          1013,
          `This server holds ${limits.maxConnections} websocket clients, the most WEBSOCKET_MAX_CONNECTIONS allows: try again later`,
        );
      // Counted with this one: it has nothing bound yet.
      if (unboundFrom(clientAddress) > limits.maxUnboundPerAddress) {
        return refuse(
          client,
          'server-full',
          1013,
          `This address has ${limits.maxUnboundPerAddress} websocket connections with nothing bound, the most WEBSOCKET_MAX_UNBOUND_PER_ADDRESS allows: bind them first`,
        );
      }
      client.bindDeadline = setTimeout(() => {
        refuse(client, 'idle', 1000, `Nothing bound within ${Math.round(limits.bindTimeoutMs / 1000)} s of connecting: send bind-with-token <token> at once`);
      }, limits.bindTimeoutMs);
      client.bindDeadline.unref();
      socket.on('message', (data: Buffer, isBinary: boolean) => {
        client.work = client.work
          .then(() => handle(client, data, isBinary))
          .catch((error: unknown) => {
            logger.warn({ err: error, connection: client.id }, 'a websocket bind failed');
            refuse(client, 'token', 1011, 'The bind failed on the server: try again with a new token');
          });
      });
    },
    failed(socket, error) {
      const client = bySocket.get(socket);
      if (client === undefined) return;
      const tooLarge = (error as { code?: string }).code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH';
      // ws closes the connection itself (1009 for a message over the limit).
      end(client, tooLarge ? 'too-large' : 'client');
      logger.debug({ err: error, connection: client.id }, 'websocket client error');
    },
    async close() {
      closing = true;
      clearInterval(idle);
      for (const client of clients) {
        end(client, 'shutdown');
        client.socket.close(1001, 'The service is stopping');
      }
      const running = await started?.catch(() => undefined);
      if (running !== undefined) {
        clearInterval(running.poll);
        await running.listener.close();
        // Its bindings go with its registration (the foreign key).
        await running.registration.stop().catch((error: unknown) => logger.warn({ err: error }, 'could not end the websocket server registration'));
      }
    },
  };
}

/** What a client may send: a bind, and Medplum's unbind and keepalive. */
type ClientMessage = { type: 'bind-with-token' | 'unbind-from-token'; token: string } | { type: 'ping' };

/**
 * A client's message: `bind-with-token <token>`, or Medplum's JSON forms
 * `{"type":"bind-with-token","payload":{"token":"…"}}`, `{"type":"unbind-from-token","payload":{"token":"…"}}`
 * and `{"type":"ping"}`; undefined for anything else.
 */
export function clientMessageIn(message: string): ClientMessage | undefined {
  const text = /^bind-with-token[ :]\s*(\S+)\s*$/.exec(message.trim());
  if (text !== null) return { type: 'bind-with-token', token: text[1]! };
  let json: { type?: unknown; payload?: { token?: unknown } } | null;
  try {
    json = JSON.parse(message) as typeof json;
  } catch {
    return undefined;
  }
  if (json?.type === 'ping') return { type: 'ping' };
  if (json?.type !== 'bind-with-token' && json?.type !== 'unbind-from-token') return undefined;
  const token = json.payload?.token;
  return typeof token === 'string' && token !== '' ? { type: json.type, token } : undefined;
}

/** A close reason within the frame's 123 bytes. */
function closeReason(text: string): string {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= maxCloseReasonBytes) return text;
  return `${bytes
    .subarray(0, maxCloseReasonBytes - 3)
    .toString('utf8')
    .replace(/\uFFFD$/, '')}...`;
}
