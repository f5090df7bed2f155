import type { Db } from '../../db/database.ts';
import { failReactivation, isSuperseded, reactivate } from '../../subscriptions/state.ts';
import { call, countCalls, describeFailure, handshakeBundle, loadTarget, recordAttempt, type CallContext, type DispatchContext, type Target } from '../delivery.ts';
import { numberMissedEvents, recordEvents, reopenMissedEvent } from '../events/log.ts';
import type { CallResult } from '../outbound.ts';
import { eventKey, type ResourceEvent, type VersionEvent } from './jobs.ts';

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
  const deliver = (db: Db) => (target?.topic === undefined ? recordEvents(db, subscriptionId, [versionEvent]) : reopenMissedEvent(db, subscriptionId, versionEvent));
  // Reactivated meanwhile (by an earlier event's job, or an operator's request): a classic subscription's event is
  // delivered like any other; a topic-based one's stays missed (sent now, it would come after later ones): its subscriber sees the gap.
  const deliverToActive = () => (target?.topic === undefined ? deliver(context.db) : undefined);
  if (target?.status === 'active') return deliverToActive();
  if (target?.status !== 'error') return;
  if (await isSuperseded(context.db, target.id)) return;
  const { result, reason, reactivated } = await reactivationHandshake(context, target, {
    event: versionEvent,
    message: `reactivation handshake for ${eventKey(versionEvent)}`,
    onReactivated: deliver,
    ...(signal === undefined ? {} : { signal }),
  });
  if (reactivated) context.logger.info({ subscriptionId, resource: eventKey(versionEvent) }, 'subscription reactivated by a new event');
  else if (result.verdict !== 'delivered') context.logger.info({ subscriptionId, reason }, 'subscription reactivation failed; still in error');
  // The handshake passed, but another reactivation got there first.
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
 * (src/subscriptions/reactivation.ts). A topic-based subscription's missed
 * events are numbered first, and the handshake tells their count. The call is
 * recorded as a `handshake` attempt (of `event`, when an event asked). 2xx: error
 * → active (reactivate(), which does nothing when the subscription was
 * superseded, reactivated or switched off meanwhile) and `onReactivated`, in
 * the recording transaction. A failure: still in error with the new reason,
 * and the events of a while longer leave it there (failReactivation).
 */
export async function reactivationHandshake(
  context: CallContext,
  target: Target,
  { event, message, onReactivated, signal }: { event?: VersionEvent; message: string; onReactivated?: (db: Db) => Promise<void>; signal?: AbortSignal },
): Promise<ReactivationHandshake> {
  // The handshake tells a topic-based subscriber how many events there were, the missed ones numbered.
  const eventsSoFar = target.topic === undefined ? 0 : await numberMissedEvents(context.db, target.id);
  const result = await call(context, target, { body: handshakeBundle(context, target, eventsSoFar), message, type: 'handshake', lastEventNumber: null }, signal);
  const reason = `Reactivation handshake failed: ${describeFailure(result, target.endpoint)}`;
  const { record, reactivated } = await context.db.transaction().execute(async (db) => {
    const record = await recordAttempt(db, target.id, 'handshake', event, 1, result, result.verdict === 'delivered' ? 'delivered' : 'failed');
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
}
