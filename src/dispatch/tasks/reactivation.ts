import { setTimeout as sleep } from 'node:timers/promises';
import type { Db } from '../../db/database.ts';
import { claimReactivation, failReactivation, reactivate, releaseReactivation } from '../../subscriptions/state.ts';
import { isSuperseded } from '../../db/sql/subscription-is-superseded.ts';
import {
  call,
  countCalls,
  describeFailure,
  handshakeBundle,
  loadTarget,
  recordAttempt,
  type CallContext,
  type DispatchContext,
  type Target,
} from '../subscriber.ts';
import { recordEvents, reopenMissedEvent } from '../events/log.ts';
import { numberMissedEvents } from '../../db/sql/number-missed-events.ts';
import type { CallResult } from '../../channels/channel.ts';
import { eventKey, type ResourceEvent, type VersionEvent } from '../../db/jobs.ts';

/**
 * subscription_reactivation: the next matching event of a subscription in
 * error. The handshake again; on success the subscription is active and this
 * event goes into its event log, to be delivered like any other; on failure it stays in error with the new reason.
 * Missed events are not replayed. A superseded subscription is not called.
 */
export async function reactivation(context: DispatchContext, event: ResourceEvent, signal?: AbortSignal): Promise<void> {
  const { subscriptionId, attempt: _attempt, ...versionEvent } = event;
  const target = await loadTarget(context, event.subscriptionId);
  // A topic-based subscription's event is in the log already, recorded while it was in error.
  const deliver = (db: Db) =>
    target?.topic === undefined ? recordEvents(db, subscriptionId, [versionEvent]) : reopenMissedEvent(db, subscriptionId, versionEvent);
  // Reactivated meanwhile (by an earlier event's job, or an operator's request): a classic subscription's event is
  // delivered like any other; a topic-based one's stays missed (sent now, it would come after later ones): its subscriber sees the gap.
  const deliverToActive = () => (target?.topic === undefined ? deliver(context.db) : undefined);
  if (target?.status === 'active') return deliverToActive();
  if (target?.status !== 'error') return;
  if (await isSuperseded(context.db, target.id)) return;
  const handshake = await reactivationHandshake(context, target, {
    event: versionEvent,
    message: `reactivation handshake for ${eventKey(versionEvent)}`,
    onReactivated: deliver,
    ...(signal === undefined ? {} : { signal }),
  });
  if (handshake?.reactivated === true) context.logger.info({ subscriptionId, resource: eventKey(versionEvent) }, 'subscription reactivated by a new event');
  else if (handshake !== undefined && handshake.result.verdict !== 'delivered')
    context.logger.info({ subscriptionId, reason: handshake.reason }, 'subscription reactivation failed; still in error');
  // Another reactivation got there first (while this one waited for its turn, or while its handshake was in flight).
  else if ((await loadTarget(context, subscriptionId))?.status === 'active') await deliverToActive();
}

export type ReactivationHandshake = {
  result: CallResult;
  /** The subscription's new error when the handshake failed. */
  reason: string;
  /** Whether this handshake made it active (not when it failed, nor when it was reactivated, superseded or switched off meanwhile). */
  reactivated: boolean;
};

/**
 * The reactivation handshake of a subscription in error and the change it
 * makes, whoever asks: an event's job (above) or an operator
 * (src/dispatch/reactivation-on-request.ts). One at a time per subscription: it
 * waits for another handshake in flight (claimReactivation, in any process),
 * and returns undefined, calling nothing, when the subscription is no longer
 * in error when its turn comes (that one reactivated it, or it was switched
 * off). A topic-based subscription's missed events are numbered first, and
 * the handshake tells their count. The call is recorded as a `handshake`
 * attempt (of `event`, when an event asked). 2xx: error → active
 * (reactivate(), which does nothing when the subscription was superseded or
 * switched off meanwhile) and `onReactivated`, in the recording transaction.
 * A failure: still in error with the new reason (failReactivation); the next
 * event sends the handshake again.
 */
export async function reactivationHandshake(
  context: CallContext,
  target: Target,
  { event, message, onReactivated, signal }: { event?: VersionEvent; message: string; onReactivated?: (db: Db) => Promise<void>; signal?: AbortSignal },
): Promise<ReactivationHandshake | undefined> {
  const claimedUntil = await claimWhenFree(context, target.id, signal);
  if (claimedUntil === undefined) return undefined;
  try {
    // The handshake tells a topic-based subscriber how many events there were, the missed ones numbered.
    const eventsSoFar = target.topic === undefined ? 0 : await numberMissedEvents(context.db, target.id);
    const result = await call(
      context,
      target,
      { body: handshakeBundle(context, target, eventsSoFar), message, type: 'handshake', lastEventNumber: null },
      signal,
    );
    const reason = `Reactivation handshake failed: ${describeFailure(result, target.endpoint)}`;
    const { record, reactivated } = await context.db.transaction().execute(async (db) => {
      const record = await recordAttempt(db, target.id, 'handshake', event, 1, result, result.verdict === 'delivered' ? 'delivered' : 'failed');
      await releaseReactivation(db, target.id, claimedUntil);
      if (result.verdict !== 'delivered') {
        await failReactivation(db, target.id, reason);
        return { record, reactivated: false };
      }
      if (!(await reactivate(db, target.id))) return { record, reactivated: false };
      await onReactivated?.(db);
      return { record, reactivated: true };
    });
    countCalls(context, [record]);
    return { result, reason, reactivated };
  } catch (error) {
    // Not recorded (a shutdown cut it short): the next reactivation need not wait for the claim to run out.
    await releaseReactivation(context.db, target.id, claimedUntil);
    throw error;
  }
}

/** How often a reactivation waiting for another's handshake looks whether it has ended. */
const claimPollMs = 50;

/**
 * Claims the subscription's reactivation handshake, waiting while another
 * holds it: the claim's end, or undefined once the subscription is not in
 * error. A claim lasts as long as a handshake may (connection, answer, and a
 * margin for an OAuth token and a place at the origin), so that a process
 * that died with one holds the others up no longer.
 */
async function claimWhenFree(context: CallContext, id: string, signal: AbortSignal | undefined): Promise<Date | undefined> {
  const forMs = context.delivery.connectTimeoutMs + context.delivery.responseTimeoutMs + 30_000;
  for (;;) {
    const claimedUntil = await claimReactivation(context.db, id, forMs);
    if (claimedUntil !== undefined) return claimedUntil;
    const now = await context.db.selectFrom('webhook.subscriptions').select('status').where('id', '=', id).executeTakeFirst();
    if (now?.status !== 'error') return undefined;
    await sleep(claimPollMs, undefined, signal === undefined ? {} : { signal });
  }
}
