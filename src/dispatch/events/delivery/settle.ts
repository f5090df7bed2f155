import type { Db } from '../../../db/database.ts';
import { countRefusals, deactivate } from '../../../subscriptions/state.ts';
import { countCalls, describeFailure, type DispatchContext, type Target } from '../../subscriber.ts';
import type { CallResult } from '../../../channels/channel.ts';
import type { VersionEvent } from '../../../db/jobs.ts';
import { settleClaim } from '../log.ts';
import type { NotificationOfEvents } from './build.ts';
import { withoutFailures, type Verdict } from './judge.ts';
import type { Sent } from './send.ts';
import type { SettleBatches } from './settle-batches.ts';

/**
 * The settle stage of a claim's delivery (src/dispatch/events/delivery/deliver-claim.ts):
 * the verdict written, the claim released or kept, the state changes that
 * follow, and what the metrics count of it.
 */

/**
 * Records a batch's calls and outcomes and releases the claim (unless
 * `keepClaim`, which only a batch without failures is given): when nothing
 * failed (the common path), in the sender's next statement of settlements
 * (`batches`, with those of its other subscriptions), else in one
 * transaction with the count of refusals and the deactivation, when it
 * comes to that.
 */
export async function settle(
  context: DispatchContext,
  batches: SettleBatches,
  senderId: string,
  target: Target,
  verdict: Verdict,
  { keepClaim, nextCallAt }: { keepClaim: boolean; nextCallAt: Date | undefined },
): Promise<void> {
  const { records, calls, outcomes, exhausted, lastRefusal } = verdict;
  const claim = { senderId, subscriptionId: target.id };
  if (withoutFailures(verdict)) {
    await batches.settle({ ...claim, outcomes, attempts: records, resetFailureCount: verdict.delivered, keepClaim, nextCallAt });
    countCalls(context, calls);
    return;
  }
  const deactivation = await context.db.transaction().execute(async (db) => {
    await settleClaim(db, claim, outcomes, records, { resetFailureCount: false, nextCallAt });
    const refusedInARow = await countRefusals(db, target.id, verdict);
    const deactivating = exhausted ?? (refusedInARow !== undefined && refusedInARow >= target.retry.maxFailures ? lastRefusal : undefined);
    // The subscription goes to error: its pending events are abandoned with it (a trigger), like any later event.
    return deactivating === undefined ? undefined : deactivateFor(db, target, deactivating.event, deactivating.result);
  });
  countCalls(context, calls);
  if (deactivation !== undefined) {
    context.metrics.deactivated();
    const resourceUrl = `${context.baseUrl}/fhir/resources/${deactivation.resource}`;
    context.logger.warn({ subscriptionId: target.id, reason: deactivation.reason, resourceUrl }, 'subscription deactivated after repeated delivery failures');
  } else if (verdict.retried > 0) {
    context.metrics.retryScheduled('notification', verdict.retried);
    context.logger.info({ subscriptionId: target.id, events: verdict.retried }, 'notifications failed; retrying');
  }
}

/**
 * Deactivates with a reason naming the event not delivered (the resource the
 * alert links to); what happened, for the caller to count and log once
 * committed, or undefined when the subscription was no longer active.
 */
async function deactivateFor(db: Db, target: Target, event: VersionEvent, result: CallResult): Promise<{ reason: string; resource: string } | undefined> {
  const reason = `${describeFailure(result, target.endpoint)}; ${event.resourceType}/${event.resourceId} (version ${event.versionId}) was not delivered`;
  if ((await deactivate(db, target.id, reason, target.contactEmails)) === undefined) return undefined;
  return { reason, resource: `${event.resourceType}/${event.resourceId}` };
}

/** Commit to delivery, for each event delivered: from its version's lastUpdated to the subscriber's answer. */
export function observeLatencies(context: DispatchContext, notifications: NotificationOfEvents[], results: Sent[]): void {
  for (const [index, result] of results.entries()) {
    if (typeof result === 'string' || result.verdict !== 'delivered') continue;
    const answeredAt = new Date(result.startedAt.getTime() + result.durationMs);
    for (const committedAt of notifications[index]!.committedAt) context.metrics.delivered(committedAt, answeredAt);
  }
}
