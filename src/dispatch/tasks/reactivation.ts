import type { Db } from '../../db/database.ts';
import { enqueueNotifications, eventKey, type ResourceEvent } from '../../db/jobs.ts';
import { failReactivation, isSuperseded, reactivate } from '../../subscriptions/state.ts';
import { call, describeFailure, handshakeBundle, loadTarget, recordAttempt, type DispatchContext } from '../delivery.ts';

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
  await context.db.transaction().execute(async (db) => {
    if (result.verdict === 'delivered') {
      if (await reactivate(db, target.id)) await deliver(db);
    } else {
      await failReactivation(db, target.id, `Reactivation handshake failed: ${describeFailure(result, target.endpoint)}`);
    }
    await recordAttempt(context, db, target.id, 'handshake', event, 1, result, result.verdict === 'delivered' ? 'delivered' : 'failed');
  });
}
