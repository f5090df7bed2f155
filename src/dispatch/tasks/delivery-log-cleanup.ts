import { sql } from 'kysely';
import type { DispatchContext } from '../delivery.ts';

/**
 * delivery_log_cleanup: daily (graphile-worker's crontab), deletes attempt
 * records older than DELIVERY_LOG_RETENTION_DAYS, and the graphile-worker
 * queues left without jobs: every subscription that had notifications has a
 * queue row, and each job fetch locks the rows of all queues.
 */
export async function deliveryLogCleanup(context: DispatchContext): Promise<void> {
  await sql`DELETE FROM webhook.delivery_attempts WHERE started_at < now() - make_interval(days => ${context.delivery.logRetentionDays})`.execute(context.db);
  await context.workerUtils.cleanup({ tasks: ['GC_JOB_QUEUES'] });
}
