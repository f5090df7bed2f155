import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import { enqueueJob } from '../db/jobs.ts';
import { reactivationBackoff } from '../db/sql/reactivation-backoff.ts';
import { subscriptionIsSuperseded } from '../db/sql/subscription-is-superseded.ts';

/**
 * The subscription state machine, as the dispatcher drives it. Each change is
 * one guarded statement: it does nothing when the subscription is no longer in
 * the state it expects (another job got there first). Call them in the
 * transaction that records the attempt that caused them.
 *
 *   requested → active     the handshake answered 2xx
 *   requested → error      the handshake failed for good
 *   active    → error      an event's last attempt failed, or DELIVERY_MAX_FAILURES
 *                          events in a row were refused for good (an alert goes out)
 *   error     → active     a reactivation handshake answered 2xx, unless superseded
 *   (any)     → off        a switch-off of its criteria (store.ts)
 *
 * A subscription that goes to error again before delivering anything (a
 * flapping subscriber: its handshake passes, its notifications fail) waits
 * longer each time before an event may reactivate it
 * (webhook.reactivation_backoff, migration 0025); a delivery ends the run
 * (settleClaim in src/dispatch/events/log.ts). A failed reactivation
 * handshake does not lengthen the wait (migration 0033): the next event sends
 * it again. One reactivation handshake per subscription is in flight at a
 * time, whoever asks for it (claimReactivation).
 *
 * A subscription in error for whose criteria a newer subscription exists is
 * superseded and never called again (db/migrations/0005_superseded_subscriptions.sql).
 */

export async function activate(db: Db, id: string): Promise<void> {
  await db
    .updateTable('webhook.subscriptions')
    .set({ status: 'active', failure_count: 0, error: null })
    .where('id', '=', id)
    .where('status', '=', 'requested')
    .execute();
}

export async function failHandshake(db: Db, id: string, reason: string): Promise<void> {
  await db.updateTable('webhook.subscriptions').set({ status: 'error', error: reason }).where('id', '=', id).where('status', '=', 'requested').execute();
}

/**
 * The events in a row refused for good, after a batch of deliveries: the
 * refusals after its last delivery, added to the count unless the batch
 * delivered something. Returns the new count, or undefined when the
 * subscription is no longer active.
 */
export async function countRefusals(db: Db, id: string, batch: { delivered: boolean; trailingRefusals: number }): Promise<number | undefined> {
  const counted = await db
    .updateTable('webhook.subscriptions')
    .set((eb) => ({ failure_count: batch.delivered ? eb.val(batch.trailingRefusals) : eb('failure_count', '+', batch.trailingRefusals) }))
    .where('id', '=', id)
    .where('status', '=', 'active')
    .returning('failure_count')
    .executeTakeFirst();
  return counted?.failure_count;
}

/**
 * Active → error with the reason, and an alert to the contacts recorded and
 * enqueued. Returns the alert's id, or undefined when the subscription was not
 * active any more (of two events failing together, the second changes nothing).
 */
export async function deactivate(db: Db, id: string, reason: string, recipients: string[]): Promise<string | undefined> {
  const deactivated = await db
    .updateTable('webhook.subscriptions')
    .set({ status: 'error', error: reason, ...oneMoreDeactivation })
    .where('id', '=', id)
    .where('status', '=', 'active')
    .executeTakeFirst();
  if (deactivated.numUpdatedRows === 0n) return undefined;
  const alert = await db
    .insertInto('webhook.deactivation_alerts')
    .values({ subscription_id: id, recipients, reason, handled_as: null, handled_at: null })
    .returning('id')
    .executeTakeFirstOrThrow();
  await enqueueJob(db, 'deactivation_alert', { alertId: String(alert.id) });
  return String(alert.id);
}

/** Error → active after a reactivation handshake, unless superseded meanwhile; whether it happened. */
export async function reactivate(db: Db, id: string): Promise<boolean> {
  const reactivated = await db
    .updateTable('webhook.subscriptions')
    .set({ status: 'active', failure_count: 0, error: null })
    .where('id', '=', id)
    .where('status', '=', 'error')
    .where(sql<boolean>`NOT ${subscriptionIsSuperseded(id)}`)
    .executeTakeFirst();
  return reactivated.numUpdatedRows > 0n;
}

/** A failed reactivation handshake: still in error, with the new reason; the next event sends the handshake again. */
export async function failReactivation(db: Db, id: string, reason: string): Promise<void> {
  await db.updateTable('webhook.subscriptions').set({ error: reason }).where('id', '=', id).where('status', '=', 'error').execute();
}

/**
 * Claims the reactivation handshake of a subscription in error for `forMs`
 * (migration 0033): the claim's end, or undefined when another handshake's
 * claim holds it or the subscription is not in error. One statement, so that
 * it holds across processes.
 */
export async function claimReactivation(db: Db, id: string, forMs: number): Promise<Date | undefined> {
  const claimed = await db
    .updateTable('webhook.subscriptions')
    // To the millisecond, as a Date holds it: releaseReactivation finds the claim by it.
    .set({ reactivation_claimed_until: sql<Date>`date_trunc('milliseconds', now() + make_interval(secs => ${forMs / 1000}))` })
    .where('id', '=', id)
    .where('status', '=', 'error')
    .where((eb) => eb.or([eb('reactivation_claimed_until', 'is', null), eb('reactivation_claimed_until', '<=', sql<Date>`now()`)]))
    .returning('reactivation_claimed_until')
    .executeTakeFirst();
  return claimed?.reactivation_claimed_until ?? undefined;
}

/** Ends a reactivation claim, unless it ran out and another took the subscription's since. */
export async function releaseReactivation(db: Db, id: string, claimedUntil: Date): Promise<void> {
  await db
    .updateTable('webhook.subscriptions')
    .set({ reactivation_claimed_until: null })
    .where('id', '=', id)
    .where('reactivation_claimed_until', '=', claimedUntil)
    .execute();
}

/** One more time in error without a delivery, and the instant before which events leave it there. */
const oneMoreDeactivation = {
  deactivations_in_a_row: sql<number>`deactivations_in_a_row + 1`,
  reactivation_not_before: sql<Date>`now() + ${reactivationBackoff(sql<number>`deactivations_in_a_row + 1`)}`,
};
