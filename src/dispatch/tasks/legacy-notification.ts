import type { DispatchContext } from '../subscriber.ts';
import { recordEvents } from '../events/log.ts';
import type { LegacyNotification } from '../../db/jobs.ts';

/**
 * notification_delivery: a notification job of the version before the
 * subscription event log (migration 0018), left in the queue when the
 * database was upgraded (waiting, running when its worker stopped, or a
 * scheduled retry, which graphile-worker runs when it is due). Its events
 * move into the log with the calls already made for them, and go out from
 * there like any other. Should the process die before the job completes, the
 * job runs again and its events are sent twice (at least once).
 */
export async function legacyNotification(context: DispatchContext, { subscriptionId, events }: LegacyNotification): Promise<void> {
  const subscription = await context.db.selectFrom('webhook.subscriptions').select('status').where('id', '=', subscriptionId).executeTakeFirst();
  // As before the log: only an active subscription is notified.
  if (subscription?.status !== 'active') return;
  await recordEvents(
    context.db,
    subscriptionId,
    events.map(({ attempt, ...event }) => ({ ...event, attempts: (attempt ?? 1) - 1 })),
  );
}
