import type { Logger } from 'pino';
import type { WebsocketLimits } from '../../config/index.ts';
import type { Db } from '../../db/database.ts';
import type { FhirResource } from '../../db/schema.ts';
import { notificationBundle, statusParameters } from '../../topics/notification.ts';
import { redeemBindingToken, tokenDigest, type BoundSubscription } from './binding-tokens.ts';
import { bindingStarts, deleteBindings, insertBindings, otherConnectionsOfKey } from './bindings.ts';
import type { Client } from './client.ts';
import type { DispatchParts } from './dispatch-parts.ts';
import { keyLimitRefusal } from './limits.ts';
import { clientMessageIn, pong, refusals, tokenRefused } from './messages.ts';
import type { Relay } from './relay.ts';
import type { Sending } from './sending.ts';

/**
 * What the server does with a client's messages, one after the other: a
 * bind-with-token binds its token's subscriptions (a handshake each), an
 * unbind-from-token ends them, a ping is answered; anything else is refused.
 */
export function createProtocol({
  db,
  baseUrl,
  limits,
  logger,
  dispatch,
  serverId,
  sending,
  relay,
  start,
  isClosing,
}: {
  db: Db;
  baseUrl: string;
  limits: Pick<WebsocketLimits, 'maxConnectionsPerKey'>;
  logger: Pick<Logger, 'info' | 'warn'>;
  dispatch: Pick<DispatchParts, 'numberMissedEvents'>;
  serverId: string;
  sending: Sending;
  relay: Relay;
  /** Starts the server's registration and relay, once: by the first bind. */
  start: () => Promise<unknown>;
  isClosing: () => boolean;
}) {
  const { send, refuse } = sending;

  const bind = async (client: Client, token: string) => {
    const redeemed = await redeemBindingToken(db, token);
    if ('refused' in redeemed) return refuse(client, tokenRefused(redeemed.refused));
    const keyFull = keyLimitRefusal(limits, await otherConnectionsOfKey(db, redeemed.apiKeyId, client.id));
    if (keyFull !== undefined) return refuse(client, keyFull);
    await start();
    if (client.endedBy !== undefined) return;
    const subscriptionIds = redeemed.subscriptions.map((subscription) => subscription.id);
    // Followed before the numbers are read: what is read meanwhile waits in `binding`, filtered once they are known.
    relay.follow(client, subscriptionIds, redeemed.apiKeyId);
    await insertBindings(db, serverId, client, redeemed.apiKeyId, subscriptionIds);
    // After the rows committed: an event numbered later is published to this client.
    const rows = await bindingStarts(db, subscriptionIds);
    for (const subscription of redeemed.subscriptions) {
      const row = rows.find((candidate) => candidate.id === subscription.id);
      // A subscription out of `active` has its missed events numbered first, as $status counts them.
      const lastEventNumber = subscription.status === 'active' ? Number(row?.last_event_number ?? 0) : await dispatch.numberMissedEvents(subscription.id);
      relay.handshaken(
        client,
        subscription.id,
        { lastEventNumber, lastNotification: row?.last_notification ?? '0' },
        JSON.stringify(handshake(subscription, lastEventNumber)),
      );
    }
    client.tokens.set(tokenDigest(token), subscriptionIds);
    logger.info({ connection: client.id, address: client.address, subscriptions: subscriptionIds }, 'websocket client bound');
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
      sending.tell(client, 'This token bound nothing on this connection: nothing was unbound');
      return;
    }
    client.tokens.delete(digest);
    const subscriptions = named.filter((subscriptionId) => client.bound.has(subscriptionId));
    for (const subscriptionId of subscriptions) relay.unfollow(client, subscriptionId);
    if (subscriptions.length > 0) await deleteBindings(db, client.id, subscriptions);
    logger.info({ connection: client.id, address: client.address, subscriptions }, 'websocket client unbound');
  };

  const handle = async (client: Client, data: Buffer, isBinary: boolean) => {
    if (client.endedBy !== undefined) return;
    if (isClosing()) return refuse(client, refusals.stopping);
    if (isBinary) return refuse(client, refusals.binaryFrame);
    const message = clientMessageIn(data.toString('utf8'));
    if (message === undefined) return refuse(client, refusals.unknownMessage);
    if (message.type === 'ping') {
      client.lastPongAt = Date.now();
      return send(client, pong, undefined);
    }
    if (message.type === 'unbind-from-token') return unbind(client, message.token);
    // Sent in time: a bind that takes longer than the deadline is not cut off.
    clearTimeout(client.bindDeadline);
    await bind(client, message.token);
  };

  return {
    /** Handles the client's messages, one after the other; a message that fails ends it. */
    listen(client: Client) {
      client.socket.on('message', (data: Buffer, isBinary: boolean) => {
        client.work = client.work
          .then(() => handle(client, data, isBinary))
          .catch((error: unknown) => {
            logger.warn({ err: error, connection: client.id }, 'a websocket bind failed');
            refuse(client, refusals.bindFailed);
          });
      });
    },
  };
}
