import type { DispatchContext } from '../delivery.ts';

/** deactivation_alert: the e-mail to a deactivated subscription's contacts (logged and recorded without SMTP). */
export async function deactivationAlert(context: DispatchContext, { alertId }: { alertId: string }): Promise<void> {
  const alert = await context.db
    .selectFrom('webhook.deactivation_alerts as alert')
    .innerJoin('webhook.subscriptions as subscription', 'subscription.id', 'alert.subscription_id')
    .select(['alert.id', 'alert.recipients', 'alert.reason', 'alert.created_at', 'alert.handled_as', 'subscription.id as subscriptionId', 'subscription.criteria', 'subscription.endpoint'])
    .where('alert.id', '=', alertId)
    .executeTakeFirst();
  if (!alert || alert.handled_as !== null) return;
  const lastFailure = await context.db
    .selectFrom('webhook.delivery_attempts')
    .select(['http_status', 'error', 'resource_type', 'resource_id'])
    .where('subscription_id', '=', alert.subscriptionId)
    .where('outcome', '!=', 'delivered')
    .orderBy('id', 'desc')
    .limit(1)
    .executeTakeFirst();
  // The transport throws on SMTP failure: graphile-worker then retries this job.
  const handledAs = await context.mailer
    .send({
      subscriptionId: alert.subscriptionId,
      criteria: alert.criteria,
      endpoint: alert.endpoint,
      recipients: alert.recipients,
      httpStatus: lastFailure?.http_status ?? undefined,
      errorMessage: alert.reason,
      undeliveredResourceUrl:
        lastFailure?.resource_type && lastFailure.resource_id ? `${context.baseUrl}/fhir/resources/${lastFailure.resource_type}/${lastFailure.resource_id}` : undefined,
      deactivatedAt: alert.created_at.toISOString(),
    })
    .catch((error: unknown) => {
      context.metrics.alertEmailFailed();
      throw error;
    });
  await context.db.updateTable('webhook.deactivation_alerts').set({ handled_as: handledAs, handled_at: new Date() }).where('id', '=', alert.id).execute();
}
