import { sql } from 'kysely';
import type { DispatchContext } from '../subscriber.ts';

/** Rows deleted per statement: each delete is a short transaction, never a long one that holds up the writers' vacuum. */
const chunk = 5_000;

/**
 * delivery_log_cleanup: daily (graphile-worker's crontab), deletes the attempt
 * records and the settled events older than DELIVERY_LOG_RETENTION_DAYS, a
 * chunk at a time through their time indexes (pending events are never
 * deleted); the deactivations older than it whose alert was told (sent,
 * logged, or folded into a later e-mail: an untold one is never deleted, its
 * e-mail still due), keeping a subscription's last e-mail while its
 * ALERT_EMAIL_INTERVAL_SECONDS runs (the next one waits for its end); the previous signing secrets whose rotation overlap has ended
 * (they sign nothing any more: kept, they are a secret stored for no use);
 * the operators' reactivation requests left behind by a CLI that stopped
 * waiting (it deletes its own); and graphile-worker's queues left without
 * jobs (those of the version before the event log).
 */
export async function deliveryLogCleanup(context: DispatchContext): Promise<void> {
  const days = context.delivery.logRetentionDays;
  const deleteOld = async (statement: () => Promise<{ numAffectedRows?: bigint }>) => {
    while (Number((await statement()).numAffectedRows ?? 0n) === chunk);
  };
  await deleteOld(() =>
    sql`DELETE FROM webhook.delivery_attempts WHERE id IN (
          SELECT id FROM webhook.delivery_attempts WHERE started_at < now() - make_interval(days => ${days}) LIMIT ${chunk})`.execute(context.db),
  );
  await deleteOld(() =>
    sql`DELETE FROM webhook.subscription_events WHERE id IN (
          SELECT id FROM webhook.subscription_events WHERE status <> 'pending' AND settled_at < now() - make_interval(days => ${days}) LIMIT ${chunk})`.execute(
      context.db,
    ),
  );
  await deleteOld(() =>
    sql`DELETE FROM webhook.deactivation_alerts WHERE id IN (
          SELECT id FROM webhook.deactivation_alerts
          WHERE handled_as IS NOT NULL AND created_at < now() - make_interval(days => ${days})
            AND handled_at < now() - make_interval(secs => ${context.alertIntervalSeconds})
          LIMIT ${chunk})`.execute(context.db),
  );
  await context.db
    .updateTable('webhook.subscriptions')
    .set({ previous_signing_secret_encrypted: null, previous_secret_until: null })
    .where('previous_secret_until', '<=', new Date())
    .execute();
  await sql`DELETE FROM webhook.reactivation_requests WHERE requested_at < now() - interval '1 day'`.execute(context.db);
  await context.workerUtils.cleanup({ tasks: ['GC_JOB_QUEUES'] });
}
