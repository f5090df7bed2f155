import { sql } from 'kysely';
import type { DispatchContext } from '../delivery.ts';

/** delivery_log_cleanup: daily (graphile-worker's crontab), deletes attempt records older than DELIVERY_LOG_RETENTION_DAYS. */
export async function deliveryLogCleanup(context: DispatchContext): Promise<void> {
  await sql`DELETE FROM webhook.delivery_attempts WHERE started_at < now() - make_interval(days => ${context.delivery.logRetentionDays})`.execute(context.db);
}
