import { sql } from 'kysely';
import type { Db } from '../../db/database.ts';
import type { DeliveryAttemptsTable } from '../../db/schema.ts';
import type { VersionEvent } from '../../db/jobs.ts';

/**
 * The subscription event log's contract (webhook.subscription_events and
 * webhook.subscription_streams, migration 0018; the claims,
 * webhook.subscription_claims, migration 0036; the SQL in db/functions/):
 * what the notification trigger writes, how a worker claims (the calls and
 * the claim's shape: src/db/sql/claim-subscription-events.ts), and how it
 * records what became of each event and releases its claim.
 */

/**
 * The channel the notification trigger notifies once per statement that
 * recorded events (db/functions/webhook.record_subscription_events.sql;
 * test/db/notification-triggers.test.ts listens on this name).
 */
export const eventsChannel = 'webhook_subscription_events';

/**
 * Adds events to a subscription's log (a reactivated subscription's event; a
 * notification job of the version before the log), in the caller's
 * transaction, and wakes the senders when it commits. They come after events
 * the trigger recorded, possibly of newer versions already sent: their
 * not_before (due now) tells the claim to check (webhook.prepare_claimed_events).
 */
export async function recordEvents(db: Db, subscriptionId: string, events: (VersionEvent & { attempts?: number })[]): Promise<void> {
  await sql`
    WITH recorded AS (
      INSERT INTO webhook.subscription_events (subscription_id, resource_type, resource_id, version_id, deleted, attempts, not_before)
      SELECT ${subscriptionId}::uuid, event.resource_type, event.resource_id, event.version_id, event.deleted, event.attempts, now()
      FROM jsonb_to_recordset(${JSON.stringify(events.map((event) => ({ resource_type: event.resourceType, resource_id: event.resourceId, version_id: event.versionId, deleted: event.deleted, attempts: event.attempts ?? 0 })))}::jsonb)
        AS event(resource_type text, resource_id text, version_id integer, deleted boolean, attempts integer)
      RETURNING 1
    )
    SELECT pg_notify(${eventsChannel}, '') FROM (SELECT FROM recorded LIMIT 1) any_recorded`.execute(db);
}

/**
 * The event that reactivated a topic-based subscription: the trigger recorded
 * it abandoned while the subscription was in error (numbered since, by
 * numberMissedEvents); it is pending again, its number kept, and the senders
 * are woken. Recorded anew
 * when the log no longer holds it.
 */
export async function reopenMissedEvent(db: Db, subscriptionId: string, event: VersionEvent): Promise<void> {
  const { rows } = await sql`
    WITH reopened AS (
      UPDATE webhook.subscription_events SET status = 'pending', settled_at = NULL, not_before = NULL
      WHERE subscription_id = ${subscriptionId} AND resource_type = ${event.resourceType} AND resource_id = ${event.resourceId}
        AND version_id = ${event.versionId} AND status = 'abandoned'
      RETURNING 1
    )
    SELECT pg_notify(${eventsChannel}, '') FROM (SELECT FROM reopened LIMIT 1) any_reopened`.execute(db);
  if (rows.length === 0) await recordEvents(db, subscriptionId, [event]);
}

/** What became of an event: settled (delivered, failed, gone), or pending again, to be sent no sooner than notBefore. */
export type EventOutcome = {
  eventId: string;
  status: 'pending' | 'delivered' | 'failed' | 'gone';
  /** Calls made for it, this claim's included. */
  attempts: number;
  notBefore: Date | null;
};

/** A row of webhook.delivery_attempts as a sender writes it. */
export type AttemptRow = Omit<DeliveryAttemptsTable, 'id'>;

/** What a sender records of one claim's batch: its calls, its events' outcomes, and whether it goes on with the subscription. */
export type ClaimSettlement = {
  senderId: string;
  subscriptionId: string;
  outcomes: EventOutcome[];
  attempts: AttemptRow[];
  /** A delivery ends the subscription's run of refusals, and of deactivations (migration 0025), too. */
  resetFailureCount: boolean;
  /** Keeps the claim: the sender goes on with the subscription's next events. */
  keepClaim?: boolean;
  /** When a throttled subscription's next call may start, for its next sender. */
  nextCallAt?: Date;
};

/**
 * Records a claim's calls and its events' outcomes, and releases the claim
 * unless `keepClaim`: settleClaims for one claim (in the caller's
 * transaction when it has state changes to make with them).
 */
export async function settleClaim(
  db: Db,
  claim: { senderId: string; subscriptionId: string },
  outcomes: EventOutcome[],
  attempts: AttemptRow[],
  options: { resetFailureCount: boolean; keepClaim?: boolean; nextCallAt?: Date },
): Promise<void> {
  await settleClaims(db, [{ ...claim, outcomes, attempts, ...options }]);
}

/**
 * Records the calls and outcomes of claims of different subscriptions and
 * releases each claim (unless it is kept) in one call of
 * webhook.settle_claims, as graphile-worker completes a batch of jobs in
 * one statement: a sender whose deliveries end together settles them in one
 * round trip (src/dispatch/events/delivery/settle-batches.ts). Each claim is
 * released only where its sender still holds it. At most one settlement per
 * subscription. An event abandoned meanwhile (its subscription left
 * `active`) stays so unless it was delivered or failed.
 */
export async function settleClaims(db: Db, settlements: ClaimSettlement[]): Promise<void> {
  const subscriptionIds = settlements.map((settlement) => settlement.subscriptionId);
  if (new Set(subscriptionIds).size !== subscriptionIds.length) throw new Error('settleClaims: at most one settlement per subscription in a statement');
  const claims = settlements.map((settlement) => ({
    sender_id: settlement.senderId,
    subscription_id: settlement.subscriptionId,
    keep_claim: settlement.keepClaim ?? false,
    next_call_at: settlement.nextCallAt ?? null,
    reset_failure_count: settlement.resetFailureCount,
  }));
  const outcomes = settlements.flatMap((settlement) =>
    settlement.outcomes.map((outcome) => ({ id: outcome.eventId, status: outcome.status, attempts: outcome.attempts, not_before: outcome.notBefore })),
  );
  const attempts = settlements.flatMap((settlement) => settlement.attempts);
  await sql`SELECT webhook.settle_claims(${JSON.stringify(claims)}::jsonb, ${JSON.stringify(outcomes)}::jsonb, ${JSON.stringify(attempts)}::jsonb)`.execute(db);
}

/** When a throttled subscription's next call may start, as the sender before left it (webhook.subscription_streams.next_call_at). */
export async function nextCallAt(db: Db, subscriptionId: string): Promise<Date | null> {
  const row = await db.selectFrom('webhook.subscription_streams').select('next_call_at').where('subscription_id', '=', subscriptionId).executeTakeFirst();
  return row?.next_call_at ?? null;
}

/**
 * Frees the claims this sender holds but is not working on: a claim whose
 * answer a lost connection swallowed, or whose release failed. Only those
 * older than 10 s: one just made may not have reached the sender yet.
 */
export async function releaseStrandedClaims(db: Db, senderId: string, working: string[]): Promise<number> {
  const { numAffectedRows } = await sql`
    DELETE FROM webhook.subscription_claims
    WHERE claimed_by = ${senderId} AND claimed_at < now() - interval '10 seconds'
      AND NOT (subscription_id = ANY (${working}::uuid[]))`.execute(db);
  return Number(numAffectedRows ?? 0n);
}
