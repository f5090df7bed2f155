import type { Db } from '../../db/database.ts';
import { enqueueNotifications, eventKey, type ResourceEvent } from '../../db/jobs.ts';
import { failReactivation, isSuperseded, reactivate } from '../../subscriptions/state.ts';
import { call, countCalls, describeFailure, handshakeBundle, loadTarget, recordAttempt, type DispatchContext } from '../delivery.ts';

/**
 * subscription_reactivation: the next matching event of a subscription in
 * error. The handshake again; on success the subscription is active and this
 * event is delivered, on failure it stays in error with the new reason.
 * Missed events are not replayed. A superseded subscription is not called.
 */
export async function reactivation(context: DispatchContext, event: ResourceEvent, signal?: AbortSignal): Promise<void> {
  const { subscriptionId, ...batchEvent } = event;
  const deliver = (db: Db) => enqueueNotifications(db, { subscriptionId, events: [{ ...batchEvent, attempt: 1 }] });
  const target = await loadTarget(context, event.subscriptionId);
  // Reactivated meanwhile (by an earlier event's job): this event is delivered like any other.
  if (target?.status === 'active') return deliver(context.db);
  if (target?.status !== 'error') return;
  if (await isSuperseded(context.db, target.id)) return;
  const result = await call(context, target, handshakeBundle(context, target), `reactivation handshake for ${eventKey(batchEvent)}`, signal);
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
  if (reactivated) context.logger.info({ subscriptionId, resource: eventKey(batchEvent) }, 'subscription reactivated by a new event');
  else if (result.verdict !== 'delivered') context.logger.info({ subscriptionId, reason }, 'subscription reactivation failed; still in error');
}
