import { randomUUID } from 'node:crypto';
import type { Db } from '../../db/database.ts';
import { enqueueJob, type ResourceEvent } from '../../db/jobs.ts';
import type { FhirResource } from '../../db/schema.ts';
import type { CompiledCriteria } from '../../search/criteria.ts';
import { isSupported, searchParametersOf } from '../../search/parameters.ts';
import type { Include } from '../../search/query.ts';
import { includedResources } from '../../search/search.ts';
import { countPermanentFailure, deactivate, resetFailureCount } from '../../subscriptions/state.ts';
import { attemptRecord, call, describeFailure, loadTarget, recordAttempt, retryDelay, type DispatchContext, type Target } from '../delivery.ts';
import type { CallResult } from '../outbound.ts';

/**
 * notification_delivery: one event to an active subscription. Failures are
 * counted per event: a retryable one is tried again with spacing, up to
 * DELIVERY_MAX_FAILURES attempts, and the last one failing deactivates the
 * subscription; a permanent one ends the event and counts one more event in a
 * row refused for good (DELIVERY_MAX_FAILURES of them deactivate).
 */
export async function notification(context: DispatchContext, event: ResourceEvent, signal?: AbortSignal): Promise<void> {
  const attempt = event.attempt ?? 1;
  const target = await loadTarget(context, event.subscriptionId);
  // Only active subscriptions deliver; a retry of a subscription gone to error or off stops here.
  if (target?.status !== 'active') return;
  const body = await notificationBody(context, target, event);
  if (body === undefined) {
    context.logger.warn({ event }, 'the resource version of a notification is gone; nothing to deliver');
    return;
  }
  const result = await call(context, target, body, signal);
  if (result.verdict === 'delivered') {
    // The common path in one statement, one commit: the record, and the end of a run of refusals.
    await context.db
      .with('reset', () => resetFailureCount(context.db, target.id))
      .insertInto('webhook.delivery_attempts')
      .values(attemptRecord(target.id, 'notification', event, attempt, result, 'delivered'))
      .execute();
    return;
  }
  await context.db.transaction().execute(async (db) => {
    if (result.verdict === 'retryable') {
      // Retried with spacing, so that a blip of the subscriber does not fail several events at once.
      const delay = retryDelay(context, attempt, result);
      if (delay !== undefined) {
        await enqueueJob(db, 'notification_delivery', { ...event, attempt: attempt + 1 }, { delayMs: delay });
        await recordAttempt(db, target.id, 'notification', event, attempt, result, 'retrying');
        return;
      }
      // This event's last attempt failed too.
      await deactivateFor(context, db, target, event, result);
      await recordAttempt(db, target.id, 'notification', event, attempt, result, 'failed');
      return;
    }
    // A permanent failure (a 4xx but 429, a refused address) ends this event at once.
    const refusedInARow = await countPermanentFailure(db, target.id);
    if (refusedInARow !== undefined && refusedInARow >= context.delivery.maxFailures) await deactivateFor(context, db, target, event, result);
    await recordAttempt(db, target.id, 'notification', event, attempt, result, 'failed');
  });
}

/** Deactivates with a reason naming the event not delivered (the resource the alert links to). */
async function deactivateFor(context: DispatchContext, db: Db, target: Target, event: ResourceEvent, result: CallResult): Promise<void> {
  const reason = `${describeFailure(result, target.endpoint)}; ${event.resourceType}/${event.resourceId} (version ${event.versionId}) was not delivered`;
  if ((await deactivate(db, target.id, reason, target.contactEmails)) === undefined) return;
  const resourceUrl = `${context.baseUrl}/fhir/resources/${event.resourceType}/${event.resourceId}`;
  context.logger.warn({ subscriptionId: target.id, reason, resourceUrl }, 'subscription deactivated after repeated delivery failures');
}

/**
 * The body: the resource version itself; for _include/_revinclude criteria a
 * searchset Bundle with it (match) and its related resources (include); for a
 * deletion the deleted resource tagged DELETE.
 */
async function notificationBody(context: DispatchContext, target: Target, event: ResourceEvent): Promise<unknown> {
  const version = await context.db
    .selectFrom('fhir.resource_history')
    .select('content')
    .where('resource_type', '=', event.resourceType)
    .where('id', '=', event.resourceId)
    .where('version_id', '=', event.versionId)
    .executeTakeFirst();
  if (!version) return undefined;
  const resource = version.content;
  if (event.deleted) {
    const meta = (resource.meta ?? {}) as { tag?: unknown[] };
    const tagSystem = `${context.baseUrl}/fhir/resources/NamingSystem/${context.namingSystem}`;
    return { ...resource, meta: { ...meta, tag: [...(meta.tag ?? []), { system: tagSystem, code: 'DELETE' }] } };
  }
  const { include, revinclude } = target.compiled;
  if (include.length === 0 && revinclude.length === 0) return resource;
  const related = await includedResources(context.db, [resource], include.map(toInclude), revinclude.map(toInclude));
  const entry = (mode: 'match' | 'include') => (item: FhirResource) => ({
    fullUrl: `${context.baseUrl}/fhir/resources/${item.resourceType}/${item.id}`,
    resource: item,
    search: { mode },
  });
  return { resourceType: 'Bundle', id: randomUUID(), type: 'searchset', total: 1, entry: [entry('match')(resource), ...related.map(entry('include'))] };
}

function toInclude({ sourceType, parameter, targetType, iterate }: CompiledCriteria['include'][number]): Include {
  const definition = searchParametersOf(sourceType).get(parameter);
  if (!definition || !isSupported(definition)) throw new Error(`stored include ${sourceType}:${parameter} no longer resolves`);
  return { sourceType, parameter: definition, iterate, ...(targetType === undefined ? {} : { targetType }) };
}
