import { enqueueJob, type JobPayload } from '../../db/jobs.ts';
import { activate, failHandshake } from '../../subscriptions/state.ts';
import { call, describeFailure, handshakeBundle, loadTarget, recordAttempt, retryDelay, type DispatchContext } from '../delivery.ts';

/**
 * subscription_handshake: the first call to a new subscription. 2xx makes it
 * active; a retryable failure is tried again, up to DELIVERY_MAX_FAILURES
 * attempts; a permanent failure, or the last attempt failing, puts it in error.
 */
export async function handshake(context: DispatchContext, { subscriptionId, attempt = 1 }: JobPayload<'subscription_handshake'>, signal?: AbortSignal): Promise<void> {
  const target = await loadTarget(context, subscriptionId);
  if (target?.status !== 'requested') return;
  const result = await call(context, target, handshakeBundle(context, target), 'handshake', signal);
  await context.db.transaction().execute(async (db) => {
    if (result.verdict === 'delivered') {
      await activate(db, target.id);
      await recordAttempt(context, db, target.id, 'handshake', undefined, attempt, result, 'delivered');
      return;
    }
    const delay = result.verdict === 'retryable' ? retryDelay(context, attempt, result) : undefined;
    if (delay !== undefined) {
      await enqueueJob(db, 'subscription_handshake', { subscriptionId, attempt: attempt + 1 }, { delayMs: delay });
      await recordAttempt(context, db, target.id, 'handshake', undefined, attempt, result, 'retrying');
      context.metrics.retryScheduled('handshake');
      return;
    }
    await failHandshake(db, target.id, `Handshake failed: ${describeFailure(result, target.endpoint)}`);
    await recordAttempt(context, db, target.id, 'handshake', undefined, attempt, result, 'failed');
  });
}
