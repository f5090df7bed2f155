import { sql } from 'kysely';
import type { Db } from '../../db/database.ts';
import type { DispatchContext } from '../subscriber.ts';
import { enqueueJob } from '../../db/jobs.ts';

/**
 * deactivation_alert: the e-mail to a deactivated subscription's contacts
 * (logged and recorded without SMTP). A subscription's first alert goes out at
 * once; after one, its contacts get no other for ALERT_EMAIL_INTERVAL_SECONDS:
 * the deactivations meanwhile are told together at the interval's end, in one
 * e-mail with their count and the latest reason (db/migrations/0028). A
 * flapping subscriber (handshake fine, notifications failing) is deactivated
 * at each event; its contacts get one e-mail an interval, not one each time.
 */
export async function deactivationAlert(context: DispatchContext, { alertId }: { alertId: string }): Promise<void> {
  const alert = await context.db.selectFrom('webhook.deactivation_alerts').select('subscription_id').where('id', '=', alertId).executeTakeFirst();
  if (alert === undefined) return;
  // The transaction holds this subscription's untold alerts locked while their e-mail is sent: a second job
  // of the same subscription waits, then finds them told (and the interval begun). An SMTP failure rolls it back,
  // and graphile-worker retries the job.
  await context.db.transaction().execute((db) => tellUntoldAlerts(context, db, alert.subscription_id));
}

async function tellUntoldAlerts(context: DispatchContext, db: Db, subscriptionId: string): Promise<void> {
  const untold = await db
    .selectFrom('webhook.deactivation_alerts')
    .select(['id', 'recipients', 'reason', 'created_at'])
    .where('subscription_id', '=', subscriptionId)
    .where('handled_as', 'is', null)
    .orderBy('id')
    .forUpdate()
    .execute();
  const latest = untold.at(-1);
  if (latest === undefined) return;
  const previous = await previousAlert(db, subscriptionId, context.alertIntervalSeconds);
  if (previous !== undefined && previous.waitMs > 0) {
    // One job per subscription waits for the interval's end (the job key); it tells all that are untold then.
    await enqueueJob(db, 'deactivation_alert', { alertId: latest.id }, { delayMs: previous.waitMs, jobKey: `deactivation_alert:${subscriptionId}` });
    return;
  }
  const subscription = await db.selectFrom('webhook.subscriptions').select(['criteria', 'endpoint']).where('id', '=', subscriptionId).executeTakeFirstOrThrow();
  const lastFailure = await db
    .selectFrom('webhook.delivery_attempts')
    .select(['http_status', 'resource_type', 'resource_id'])
    .where('subscription_id', '=', subscriptionId)
    .where('outcome', '!=', 'delivered')
    .orderBy('id', 'desc')
    .limit(1)
    .executeTakeFirst();
  // The transport throws on SMTP failure: graphile-worker then retries this job.
  const handledAs = await context.mailer
    .send({
      subscriptionId,
      criteria: subscription.criteria,
      endpoint: subscription.endpoint,
      recipients: latest.recipients,
      httpStatus: lastFailure?.http_status ?? undefined,
      errorMessage: latest.reason,
      undeliveredResourceUrl:
        lastFailure?.resource_type && lastFailure.resource_id
          ? `${context.baseUrl}/fhir/resources/${lastFailure.resource_type}/${lastFailure.resource_id}`
          : undefined,
      deactivatedAt: latest.created_at.toISOString(),
      deactivations: untold.length,
      previousAlertAt: previous?.at.toISOString(),
    })
    .catch((error: unknown) => {
      context.metrics.alertEmailFailed();
      throw error;
    });
  const handledAt = new Date();
  await db
    .updateTable('webhook.deactivation_alerts')
    .set({ handled_as: handledAs, handled_at: handledAt, deactivations_told: untold.length })
    .where('id', '=', latest.id)
    .execute();
  if (untold.length > 1) {
    const folded = untold.slice(0, -1).map((row) => row.id);
    await db
      .updateTable('webhook.deactivation_alerts')
      .set({ handled_as: 'folded', handled_at: handledAt, told_in: latest.id })
      .where('id', 'in', folded)
      .execute();
  }
}

/** The subscription's last alert told, and how long until the next may be (0 or less: now). */
async function previousAlert(db: Db, subscriptionId: string, intervalSeconds: number): Promise<{ at: Date; waitMs: number } | undefined> {
  const { rows } = await sql<{ at: Date; wait_ms: number }>`
    SELECT handled_at AS at,
           extract(epoch FROM handled_at + make_interval(secs => ${intervalSeconds}) - now())::float8 * 1000 AS wait_ms
    FROM webhook.deactivation_alerts
    WHERE subscription_id = ${subscriptionId} AND handled_as IN ('sent', 'logged')
    ORDER BY created_at DESC
    LIMIT 1`.execute(db);
  const row = rows[0];
  return row === undefined ? undefined : { at: row.at, waitMs: Math.ceil(row.wait_ms) };
}
