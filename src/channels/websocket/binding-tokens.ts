import { createHash, randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { visibleTo, type Caller } from '../../auth/api-keys.ts';
import type { Db } from '../../db/database.ts';
import { isUuid, type FhirResource, type PayloadContent, type SubscriptionStatus } from '../../db/schema.ts';
import { notFound, refusal } from '../../fhir/outcome.ts';
import { websocketUrl } from './channel.ts';

/**
 * $get-ws-binding-token (Backport IG; R5's Subscription operation): a token
 * with which a websocket client binds to websocket subscriptions
 * (src/channels/websocket/channel.ts). A token is for the key that asked and the
 * subscriptions it named, each visible to that key; it binds once, before it
 * expires (WEBSOCKET_BINDING_TOKEN_SECONDS). Only its SHA-256 is stored: the
 * answer shows it once. A bind checks again that the key is not revoked and
 * still sees each subscription, and that none is off.
 */

/** The most subscriptions one token binds: narrow with `id`. */
export const maxSubscriptionsPerToken = 100;

/** What is stored of a token (and what a websocket client's unbind is matched by): its SHA-256, never the token. */
export function tokenDigest(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

/**
 * Issues a token for `ids` (none: every websocket subscription the caller
 * sees that is not off), valid `lifetimeSeconds`: the IG's Parameters
 * (token, expiration, subscription, websocket-url).
 */
export async function issueBindingToken(
  db: Db,
  { baseUrl, caller, ids, lifetimeSeconds }: { baseUrl: string; caller: Caller; ids: string[]; lifetimeSeconds: number },
): Promise<FhirResource> {
  const subscriptions = ids.length > 0 ? await named(db, caller, ids) : await allBindable(db, caller);
  const token = `fwt_${randomBytes(32).toString('base64url')}`;
  const expiresAt = new Date(Date.now() + lifetimeSeconds * 1000);
  // Tokens a day past their expiry go as new ones come: until then a late bind is told its token expired.
  await db
    .deleteFrom('webhook.websocket_binding_tokens')
    .where('expires_at', '<', sql<Date>`now() - interval '1 day'`)
    .execute();
  await db
    .insertInto('webhook.websocket_binding_tokens')
    .values({ token_sha256: tokenDigest(token), api_key_id: caller.apiKeyId, subscription_ids: subscriptions, expires_at: expiresAt, used_at: null })
    .execute();
  return {
    resourceType: 'Parameters',
    parameter: [
      { name: 'token', valueString: token },
      { name: 'expiration', valueDateTime: expiresAt.toISOString() },
      ...subscriptions.map((id) => ({ name: 'subscription', valueString: `${baseUrl}/fhir/resources/Subscription/${id}` })),
      { name: 'websocket-url', valueUrl: websocketUrl(baseUrl) },
    ],
  };
}

/** The subscriptions named, each a websocket subscription the caller sees that is not off. */
async function named(db: Db, caller: Caller, ids: string[]): Promise<string[]> {
  const wanted = [...new Set(ids)];
  if (wanted.length > maxSubscriptionsPerToken)
    throw refusal(`A token binds at most ${maxSubscriptionsPerToken} subscriptions; ${wanted.length} ids were given`);
  // An id that is not a UUID names no subscription.
  const uuids = wanted.filter(isUuid);
  const rows =
    uuids.length === 0
      ? []
      : await visibleTo(db.selectFrom('webhook.subscriptions').select(['id', 'status', 'channel_type']), caller)
          .where('id', 'in', uuids)
          .execute();
  for (const id of wanted) {
    const row = rows.find((candidate) => candidate.id === id);
    if (row === undefined) throw notFound(`Subscription/${id} is not known`);
    if (row.channel_type !== 'websocket')
      throw refusal(`Subscription/${id} has channel type ${row.channel_type}: a binding token is for websocket subscriptions`);
    if (row.status === 'off') throw refusal(`Subscription/${id} is off: nothing is sent for it any more`);
  }
  return wanted;
}

/** Every websocket subscription the caller sees that is not off, up to the limit. */
async function allBindable(db: Db, caller: Caller): Promise<string[]> {
  const rows = await visibleTo(db.selectFrom('webhook.subscriptions').select('id'), caller)
    .where('channel_type', '=', 'websocket')
    .where('status', '!=', 'off')
    .orderBy('created_at')
    .limit(maxSubscriptionsPerToken + 1)
    .execute();
  if (rows.length === 0)
    throw refusal('This API key sees no websocket subscription that is not off: create one (channel.type websocket, on a topic), or name one with id');
  if (rows.length > maxSubscriptionsPerToken)
    throw refusal(`This API key sees more than ${maxSubscriptionsPerToken} websocket subscriptions: name those to bind with id`);
  return rows.map((row) => row.id);
}

/** A subscription a redeemed token binds, as its handshake names it. */
export type BoundSubscription = { id: string; status: SubscriptionStatus; topicUrl: string; payloadContent: PayloadContent };

/** What a bind's token comes to: the key and the subscriptions it binds, or why not (said to the client). */
export type Redeemed = { apiKeyId: string; subscriptions: BoundSubscription[] } | { refused: string };

/**
 * Uses `token` for a bind: it must be known, unused and unexpired; its key
 * unrevoked, still seeing each of its subscriptions, none of them off. The
 * token is used up whatever follows (a refused bind takes a new token).
 */
export async function redeemBindingToken(db: Db, token: string): Promise<Redeemed> {
  return db.transaction().execute(async (transaction) => {
    const row = await transaction
      .selectFrom('webhook.websocket_binding_tokens as token')
      .innerJoin('webhook.api_keys as key', 'key.id', 'token.api_key_id')
      .select(['token.api_key_id', 'token.subscription_ids', 'token.used_at', 'key.scopes', 'key.revoked_at'])
      .select(sql<boolean>`token.expires_at <= now()`.as('expired'))
      .where('token.token_sha256', '=', tokenDigest(token))
      .forUpdate('token')
      .executeTakeFirst();
    if (row === undefined) return { refused: 'Unknown binding token: ask $get-ws-binding-token for one' };
    if (row.used_at !== null) return { refused: 'This binding token was used already: a token binds once; ask $get-ws-binding-token for another' };
    if (row.expired) return { refused: 'This binding token has expired: ask $get-ws-binding-token for another' };
    await transaction
      .updateTable('webhook.websocket_binding_tokens')
      .set({ used_at: sql<Date>`now()` })
      .where('token_sha256', '=', tokenDigest(token))
      .execute();
    if (row.revoked_at !== null) return { refused: 'The API key that asked for this token was revoked' };
    const caller: Caller = { apiKeyId: row.api_key_id, admin: row.scopes.includes('admin') };
    const rows = await visibleTo(
      transaction
        .selectFrom('webhook.subscriptions as s')
        .innerJoin('webhook.subscription_topics as topic', 'topic.id', 's.topic_id')
        .select(['s.id', 's.status', 's.channel_type', 's.payload_content', 'topic.url as topic_url', 's.created_by_api_key']),
      caller,
    )
      .where('s.id', 'in', row.subscription_ids)
      .execute();
    const subscriptions: BoundSubscription[] = [];
    for (const id of row.subscription_ids) {
      const found = rows.find((candidate) => candidate.id === id);
      if (found === undefined || found.channel_type !== 'websocket') return { refused: `Subscription/${id} is no longer one this token's API key may bind` };
      if (found.status === 'off') return { refused: `Subscription/${id} is off: nothing is sent for it any more` };
      subscriptions.push({ id, status: found.status, topicUrl: found.topic_url, payloadContent: found.payload_content! });
    }
    return { apiKeyId: row.api_key_id, subscriptions };
  });
}
