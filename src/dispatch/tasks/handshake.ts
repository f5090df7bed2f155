import { activate, failHandshake } from '../../subscriptions/state.ts';
import { call, countCalls, describeFailure, handshakeBundle, loadTarget, recordAttempt, type DispatchContext } from '../subscriber.ts';
import { retryDelay } from '../events/retry-delay.ts';
import { enqueueJob, type JobPayload } from '../../db/jobs.ts';

/**
 * subscription_handshake: the first call to a new subscription. 2xx makes it
 * active; a retryable failure is tried again, up to DELIVERY_MAX_FAILURES
 * attempts (or its retry policy's); a permanent failure, or the last attempt
 * failing, puts it in error.
 */
export async function handshake(
  context: DispatchContext,
  { subscriptionId, attempt = 1 }: JobPayload<'subscription_handshake'>,
  signal?: AbortSignal,
): Promise<void> {
  const target = await loadTarget(context, subscriptionId);
  if (target?.status !== 'requested') return;
  const result = await call(
    context,
    target,
    { body: handshakeBundle(context, target), message: 'handshake', type: 'handshake', lastEventNumber: null },
    signal,
  );
  const delay = result.verdict === 'retryable' ? retryDelay(target.retry, attempt, result.retryAfterSeconds) : undefined;
  const reason = `Handshake failed: ${describeFailure(result, target.endpoint)}`;
  const record = await context.db.transaction().execute(async (db) => {
    if (result.verdict === 'delivered') {
      await activate(db, target.id);
      return recordAttempt(db, target.id, 'handshake', undefined, attempt, result, 'delivered');
    }
    if (delay !== undefined) {
      await enqueueJob(db, 'subscription_handshake', { subscriptionId, attempt: attempt + 1 }, { delayMs: delay, jobKey: `handshake:${subscriptionId}` });
      return recordAttempt(db, target.id, 'handshake', undefined, attempt, result, 'retrying');
    }
    await failHandshake(db, target.id, reason);
    return recordAttempt(db, target.id, 'handshake', undefined, attempt, result, 'failed');
  });
  countCalls(context, [record]);
  // One line per change of state, once committed (the reason masks the endpoint's credentials).
  if (result.verdict === 'delivered') context.logger.info({ subscriptionId }, 'subscription activated');
  else if (delay !== undefined) {
    context.metrics.retryScheduled('handshake');
    context.logger.info({ subscriptionId, attempt, retryInMs: delay, reason }, 'subscription handshake failed; retrying');
  } else context.logger.info({ subscriptionId, attempt, reason }, 'subscription in error: its handshake failed');
}
