import { notificationBundle, statusParameters } from '../../topics/notification.ts';
import { ShutdownAbort } from '../../channels/channel.ts';
import { attemptRecord, call, countCalls, statusSubject, type DispatchContext, type Target } from '../subscriber.ts';
import { settleClaim } from './log.ts';
import type { DueHeartbeat } from '../../db/sql/claim-heartbeats.ts';

/**
 * Heartbeats (FHIR Subscriptions Backport IG, backport-heartbeat-period): a
 * topic-based subscription with a heartbeat period is told it is alive when
 * no call went to it for that long, in the IG's shape (the status, type
 * heartbeat, the latest event number). A heartbeat is recorded like any call
 * (webhook.delivery_attempts, kind heartbeat) and is not retried: the next
 * one comes a period later. It changes no state: a subscriber that fails
 * heartbeats is not deactivated by them (its notifications do that).
 */

/** Sends one heartbeat and records it, releasing the claim (whatever happens). */
export async function sendHeartbeat(
  context: DispatchContext,
  senderId: string,
  due: DueHeartbeat,
  target: Target | undefined,
  signal?: AbortSignal,
): Promise<void> {
  const claim = { senderId, subscriptionId: due.subscriptionId };
  if (target?.topic === undefined || target.status !== 'active') return settleClaim(context.db, claim, [], [], { resetFailureCount: false });
  const subject = statusSubject(context, target, target.topic);
  const body = notificationBundle(statusParameters(subject, 'heartbeat', due.lastEventNumber, []), subject, []);
  let result;
  try {
    result = await call(context, target, { body, message: `heartbeat ${new Date().toISOString()}`, type: 'heartbeat', lastEventNumber: null }, signal);
  } catch (error) {
    await settleClaim(context.db, claim, [], [], { resetFailureCount: false });
    if (error instanceof ShutdownAbort) return;
    throw error;
  }
  const record = attemptRecord(target.id, 'heartbeat', undefined, 1, result, result.verdict === 'delivered' ? 'delivered' : 'failed');
  await settleClaim(context.db, claim, [], [record], { resetFailureCount: false });
  countCalls(context, [record]);
}
