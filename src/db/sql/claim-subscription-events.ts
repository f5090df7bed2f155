import { sql } from 'kysely';
import type { Db } from '../database.ts';
import type { VersionEvent } from '../jobs.ts';

/**
 * A sender's claims of the subscription event log: the first claim
 * (db/functions/webhook.claim_subscription_events.sql, or its two halves,
 * webhook.subscriptions_to_claim and webhook.claim_events_of_subscriptions, for a
 * sender that keeps the list of candidates between claims) and the next batch of
 * a subscription it holds (db/functions/webhook.claim_more_subscription_events.sql).
 * Both return the rows of webhook.prepare_claimed_events, read here once as
 * Claims.
 */

/** At most this many events of one subscription in a claim. */
export const maxEventsPerClaim = 100;

/** A claim's bytes when its caller sets no bound (tests, one-off tools): as many as max_events allows. */
const unboundedBytes = Number.MAX_SAFE_INTEGER;

/** An event as claimed: numbered, with the calls made for it so far. */
export type ClaimedEvent = VersionEvent & {
  eventId: string;
  /** The subscription's number of the event (eventsSinceSubscriptionStart once sent). */
  eventNumber: number;
  /** Calls made for it before this claim. */
  attempts: number;
  /** What its resource version was counted for against the claim's bytes: its size uncompressed, about its JSON text's (0 when gone). */
  bytes: number;
};

/** A subscription's due events, claimed by one sender until it releases them. */
export type Claim = {
  subscriptionId: string;
  /** The subscription's versionId when claimed: what it was read as can be reused while it is the same. */
  subscriptionVersion: number;
  events: ClaimedEvent[];
  /** The bytes of its events' versions, as the claim counted them. */
  bytes: number;
  /** Whether due events of the subscription were left out (by maxEventsPerClaim or the bytes): the sender asks for them while it sends these. */
  moreDue: boolean;
};

/**
 * Claims the due events of up to `maxSubscriptions` subscriptions no sender
 * is sending, up to `maxBytes` of their resource versions in all, but at
 * least one event whatever its size
 * (db/functions/webhook.claim_subscription_events.sql).
 */
export async function claimEvents(db: Db, senderId: string, maxSubscriptions: number, maxBytes = unboundedBytes): Promise<Claim[]> {
  const { rows } = await sql<ClaimedRow>`
    SELECT * FROM webhook.claim_subscription_events(${senderId}, ${maxSubscriptions}, ${maxEventsPerClaim}, ${maxBytes})`.execute(db);
  return claimsOf(rows);
}

/** The subscriptions a sender may claim now, oldest pending event first, and how many of them its share allows. */
export type Candidates = { share: number; subscriptionIds: string[] };

/**
 * The subscriptions with pending events that no sender holds, and this
 * sender's share of them (db/functions/webhook.subscriptions_to_claim.sql):
 * the first half of claimEvents, whose list a sender keeps and claims from
 * with claimCandidates.
 */
export async function subscriptionsToClaim(db: Db, senderId: string): Promise<Candidates> {
  const { rows } = await sql<{ share: number; candidates: string[] }>`SELECT * FROM webhook.subscriptions_to_claim(${senderId})`.execute(db);
  return { share: rows[0]!.share, subscriptionIds: rows[0]!.candidates };
}

/**
 * Claims the due events of up to `maxSubscriptions` of the subscriptions
 * given, in their order, passing over those claimed or sent since, up to
 * `maxBytes` as claimEvents does (db/functions/webhook.claim_events_of_subscriptions.sql).
 */
export async function claimCandidates(
  db: Db,
  senderId: string,
  subscriptionIds: string[],
  maxSubscriptions: number,
  maxBytes = unboundedBytes,
): Promise<Claim[]> {
  const { rows } = await sql<ClaimedRow>`
    SELECT * FROM webhook.claim_events_of_subscriptions(${senderId}, ${subscriptionIds}::uuid[], ${maxSubscriptions}, ${maxEventsPerClaim}, ${maxBytes})`.execute(
    db,
  );
  return claimsOf(rows);
}

/**
 * The next batch of a subscription this sender holds: its due events after
 * the event `afterEventId`, up to `maxBytes` of their versions (none past
 * it), the claim kept (db/functions/webhook.claim_more_subscription_events.sql);
 * undefined when there is none, or it is no longer active or no longer this
 * sender's.
 */
export async function claimNextBatch(
  db: Db,
  senderId: string,
  subscriptionId: string,
  afterEventId: string,
  maxBytes = unboundedBytes,
): Promise<Claim | undefined> {
  const { rows } = await sql<ClaimedRow>`
    SELECT * FROM webhook.claim_more_subscription_events(${senderId}, ${subscriptionId}, ${afterEventId}, ${maxEventsPerClaim}, ${maxBytes})`.execute(db);
  return claimsOf(rows)[0];
}

/** A row of what the claim functions return (webhook.prepare_claimed_events's, with what the claim counted). */
type ClaimedRow = {
  subscription_id: string;
  subscription_version: number;
  event_id: string;
  event_number: string;
  resource_type: string;
  resource_id: string;
  version_id: number;
  deleted: boolean;
  attempts: number;
  bytes: number;
  more_due: boolean;
};

function claimsOf(rows: ClaimedRow[]): Claim[] {
  const claims = new Map<string, Claim>();
  for (const row of rows) {
    let claim = claims.get(row.subscription_id);
    if (claim === undefined) {
      claim = { subscriptionId: row.subscription_id, subscriptionVersion: row.subscription_version, events: [], bytes: 0, moreDue: row.more_due };
      claims.set(row.subscription_id, claim);
    }
    claim.events.push({
      eventId: row.event_id,
      eventNumber: Number(row.event_number),
      resourceType: row.resource_type,
      resourceId: row.resource_id,
      versionId: row.version_id,
      deleted: row.deleted,
      attempts: row.attempts,
      bytes: row.bytes,
    });
    claim.bytes += row.bytes;
  }
  return [...claims.values()];
}
