import type { Db } from '../../db/database.ts';
import { failReactivation, isSuperseded, reactivate } from '../../subscriptions/state.ts';
import { call, countCalls, describeFailure, handshakeBundle, loadTarget, recordAttempt, type DispatchContext } from '../delivery.ts';
import { numberMissedEvents, recordEvents, reopenMissedEvent } from '../events/log.ts';
import { eventKey, type ResourceEvent } from './jobs.ts';

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
  // Reactivated meanwhile (by an earlier event's job): a classic subscription's event is delivered like any other;
  // a topic-based one's stays missed (sent now, it would come after later ones): its subscriber sees the gap.
  if (target?.status === 'active') return target.topic === undefined ? deliver(context.db) : undefined;
  if (target?.status !== 'error') return;
  if (await isSuperseded(context.db, target.id)) return;
  // The handshake tells a topic-based subscriber how many events there were, the missed ones numbered.
  const eventsSoFar = target.topic === undefined ? 0 : await numberMissedEvents(context.db, target.id);
  const result = await call(context, target, handshakeBundle(context, target, eventsSoFar), `reactivation handshake for ${eventKey(versionEvent)}`, signal);
  const reason = `Reactivation handshake failed: ${describeFailure(result, target.endpoint)}`;
  const { record, reactivated } = await context.db.transaction().execute(async (db) => {
    const record = await recordAttempt(db, target.id, 'handshake', event, 1, result, result.verdict === 'delivered' ? 'delivered' : 'failed');
    if (result.verdict !== 'delivered') {
      await failReactivation(db, target.id, reason);
      return { record, reactivated: false };
    }
    if (!(await reactivate(db, target.id))) return { record, reactivated: false };
    await deliver(db);
    return { record, reactivated: true };
  });
  countCalls(context, [record]);
  if (reactivated) context.logger.info({ subscriptionId, resource: eventKey(versionEvent) }, 'subscription reactivated by a new event');
  else if (result.verdict !== 'delivered') context.logger.info({ subscriptionId, reason }, 'subscription reactivation failed; still in error');
}
