import { randomUUID } from 'node:crypto';
import type { Db } from '../../db/database.ts';
import { enqueueNotifications, eventKey, takeWaitingNotifications, type BatchEvent } from '../../db/jobs.ts';
import type { FhirResource } from '../../db/schema.ts';
import { FhirError } from '../../fhir/outcome.ts';
import { resolveIncludes } from '../../search/criteria.ts';
import { includedResources } from '../../search/search.ts';
import { countRefusals, deactivate, resetFailureCount } from '../../subscriptions/state.ts';
import { attemptRecord, call, countCalls, type AttemptRecord, describeFailure, loadTarget, retryDelay, ShutdownAbort, type DispatchContext, type Target } from '../delivery.ts';
import type { CallResult } from '../outbound.ts';

/**
 * notification_delivery: a batch of events to an active subscription (a
 * single-row write makes a batch of one, which takes along the jobs waiting
 * behind it in the subscription's queue). The subscription is read once, the
 * resource versions in one query, and the attempts recorded in one statement;
 * at most DELIVERY_PARALLEL_CALLS calls are in flight to the subscriber.
 *
 * Failures are counted per event: a retryable one is tried again with spacing,
 * up to DELIVERY_MAX_FAILURES attempts, and the last one failing deactivates
 * the subscription; a permanent one ends the event and counts one more event
 * in a row refused for good (DELIVERY_MAX_FAILURES of them deactivate). After
 * a retryable failure no new call starts: the subscriber is likely down, and
 * the events not yet sent wait for the retry with the failed ones.
 *
 * Order per resource: a subscriber never receives a version of a resource
 * after a newer one. Of the versions of one resource in a batch only the
 * newest is sent, and a version is skipped once the subscriber was called
 * with a newer one (a retry that comes after the next version): the newest
 * version carries the resource's state.
 */
export async function notification(context: DispatchContext, jobId: string, signal?: AbortSignal): Promise<void> {
  // Under load, single-event jobs queue up behind each other: the job takes them along.
  const batch = await takeWaitingNotifications(context.db, jobId);
  const target = await loadTarget(context, batch.subscriptionId);
  // Only active subscriptions deliver; a retry of a subscription gone to error or off stops here.
  if (target?.status !== 'active') return;
  const events = await withoutSuperseded(context.db, target.id, batch.events);
  if (events.length === 0) return;
  const versions = await notificationBodies(context, target, events);
  const results = await send(context, target, versions.map((version) => version?.body), events.map(eventKey), signal);
  await settle(context, target, judge(context, target, events, results));
  observeLatencies(context, versions, results);
}

/** Commit to delivery, for each event delivered: from its version's lastUpdated to the subscriber's answer. */
function observeLatencies(context: DispatchContext, versions: (NotificationBody | undefined)[], results: Sent[]): void {
  for (const [index, result] of results.entries()) {
    const version = versions[index];
    if (version === undefined || typeof result === 'string' || result.verdict !== 'delivered') continue;
    context.metrics.delivered(version.committedAt, new Date(result.startedAt.getTime() + result.durationMs));
  }
}

/**
 * The events still to send: of several versions of a resource, the newest,
 * and none older than a version the subscriber was already called with
 * (whatever it answered: a newer version it refused or will get again).
 */
async function withoutSuperseded(db: Db, subscriptionId: string, events: BatchEvent[]): Promise<BatchEvent[]> {
  const newest = new Map<string, BatchEvent>();
  for (const event of events) {
    const key = `${event.resourceType}/${event.resourceId}`;
    if ((newest.get(key)?.versionId ?? 0) < event.versionId) newest.set(key, event);
  }
  const candidates = [...newest.values()];
  const called = await db
    .selectFrom('webhook.delivery_attempts')
    .select(['resource_type', 'resource_id'])
    .select((eb) => eb.fn.max('version_id').as('version_id'))
    .where('subscription_id', '=', subscriptionId)
    .where('kind', '=', 'notification')
    .where((eb) =>
      eb.or(candidates.map((event) => eb.and([eb('resource_type', '=', event.resourceType), eb('resource_id', '=', event.resourceId), eb('version_id', '>', event.versionId)]))),
    )
    .groupBy(['resource_type', 'resource_id'])
    .execute();
  const overtaken = new Set(called.map((row) => `${row.resource_type}/${row.resource_id}`));
  return events.filter((event) => newest.get(`${event.resourceType}/${event.resourceId}`) === event && !overtaken.has(`${event.resourceType}/${event.resourceId}`));
}

/** What became of each event: its call's result, `gone` (its version was deleted), or `unsent`. */
type Sent = CallResult | 'gone' | 'unsent';

/**
 * Calls the subscriber for each body, at most DELIVERY_PARALLEL_CALLS at once,
 * in the batch's order. Stops starting calls after a retryable failure, or
 * when the worker shuts down (the call cut short counts as not sent).
 */
async function send(context: DispatchContext, target: Target, bodies: unknown[], messages: string[], signal?: AbortSignal): Promise<Sent[]> {
  const results: Sent[] = bodies.map(() => 'unsent');
  let next = 0;
  let stop = false;
  const lane = async (): Promise<void> => {
    while (!stop && next < bodies.length) {
      const index = next++;
      const body = bodies[index];
      if (body === undefined) {
        results[index] = 'gone';
        continue;
      }
      let result: CallResult;
      try {
        result = await call(context, target, body, messages[index]!, signal);
      } catch (error) {
        if (!(error instanceof ShutdownAbort)) throw error;
        stop = true;
        return;
      }
      results[index] = result;
      if (result.verdict === 'retryable') stop = true;
    }
  };
  await Promise.all(Array.from({ length: Math.min(context.delivery.parallelCalls, bodies.length) }, lane));
  return results;
}

/** An event and the failed call that decides something about it. */
type Failure = { event: BatchEvent; result: CallResult };

/** What a batch's calls come to, before anything is written. */
type Verdict = {
  records: AttemptRecord[];
  /** The events to try again (the failed ones with their next attempt, the unsent as they were), and when. */
  retry: BatchEvent[];
  retryDelayMs: number;
  /** The first event whose last attempt failed: it deactivates the subscription. */
  exhausted: Failure | undefined;
  /** The last event refused for good, and how many were refused after the batch's last delivery. */
  lastRefusal: Failure | undefined;
  trailingRefusals: number;
  delivered: boolean;
};

function judge(context: DispatchContext, target: Target, events: BatchEvent[], results: Sent[]): Verdict {
  const verdict: Verdict = { records: [], retry: [], retryDelayMs: 0, exhausted: undefined, lastRefusal: undefined, trailingRefusals: 0, delivered: false };
  for (const [index, event] of events.entries()) {
    const result = results[index]!;
    const attempt = event.attempt ?? 1;
    if (result === 'gone') {
      context.logger.warn({ subscriptionId: target.id, event }, 'the resource version of a notification is gone; nothing to deliver');
    } else if (result === 'unsent') {
      verdict.retry.push(event);
    } else if (result.verdict === 'delivered') {
      verdict.records.push(attemptRecord(target.id, 'notification', event, attempt, result, 'delivered'));
      verdict.delivered = true;
      verdict.trailingRefusals = 0;
    } else if (result.verdict === 'retryable') {
      // Retried with spacing, so that a blip of the subscriber does not fail several events at once.
      const delay = retryDelay(context, attempt, result);
      if (delay === undefined) verdict.exhausted ??= { event, result };
      else {
        verdict.retry.push({ ...event, attempt: attempt + 1 });
        verdict.retryDelayMs = Math.max(verdict.retryDelayMs, delay);
      }
      verdict.records.push(attemptRecord(target.id, 'notification', event, attempt, result, delay === undefined ? 'failed' : 'retrying'));
    } else {
      // A permanent failure (a 4xx but 429, a refused address) ends this event at once.
      verdict.records.push(attemptRecord(target.id, 'notification', event, attempt, result, 'failed'));
      verdict.lastRefusal = { event, result };
      verdict.trailingRefusals += 1;
    }
  }
  return verdict;
}

/**
 * Records every attempt and what follows from them: in one statement when all
 * were delivered (the common path), else in one transaction with the count of
 * refusals, and the retry or the deactivation.
 */
async function settle(context: DispatchContext, target: Target, verdict: Verdict): Promise<void> {
  const { records, retry, exhausted, lastRefusal } = verdict;
  if (exhausted === undefined && lastRefusal === undefined && retry.length === 0) {
    if (records.length === 0) return;
    await context.db
      .with('reset', () => resetFailureCount(context.db, target.id))
      .insertInto('webhook.delivery_attempts')
      .values(records)
      .execute();
    countCalls(context, records);
    return;
  }
  const outcome = await context.db.transaction().execute(async (db) => {
    if (records.length > 0) await db.insertInto('webhook.delivery_attempts').values(records).execute();
    const refusedInARow = await countRefusals(db, target.id, verdict);
    const deactivating = exhausted ?? (refusedInARow !== undefined && refusedInARow >= context.delivery.maxFailures ? lastRefusal : undefined);
    // The subscription goes to error: what is left of the batch waits for its reactivation, like any later event.
    if (deactivating !== undefined) return { deactivation: await deactivateFor(db, target, deactivating.event, deactivating.result), retrying: false };
    if (retry.length > 0) await enqueueNotifications(db, { subscriptionId: target.id, events: retry }, verdict.retryDelayMs);
    return { deactivation: undefined, retrying: retry.length > 0 };
  });
  countCalls(context, records);
  if (outcome.deactivation !== undefined) {
    context.metrics.deactivated();
    const resourceUrl = `${context.baseUrl}/fhir/resources/${outcome.deactivation.resource}`;
    context.logger.warn({ subscriptionId: target.id, reason: outcome.deactivation.reason, resourceUrl }, 'subscription deactivated after repeated delivery failures');
  }
  if (outcome.retrying) {
    context.metrics.retryScheduled('notification', retry.length);
    context.logger.info({ subscriptionId: target.id, events: retry.length, retryInMs: verdict.retryDelayMs }, 'notifications failed; retrying');
  }
}

/**
 * Deactivates with a reason naming the event not delivered (the resource the
 * alert links to); what happened, for the caller to count and log once
 * committed, or undefined when the subscription was no longer active.
 */
async function deactivateFor(db: Db, target: Target, event: BatchEvent, result: CallResult): Promise<{ reason: string; resource: string } | undefined> {
  const reason = `${describeFailure(result, target.endpoint)}; ${event.resourceType}/${event.resourceId} (version ${event.versionId}) was not delivered`;
  if ((await deactivate(db, target.id, reason, target.contactEmails)) === undefined) return undefined;
  return { reason, resource: `${event.resourceType}/${event.resourceId}` };
}

/** What is sent for an event, and when its version was committed (its lastUpdated). */
type NotificationBody = { body: unknown; committedAt: Date };

/**
 * Each event's body, read in one query: the resource version itself; for
 * _include/_revinclude criteria a searchset Bundle with it (match) and its
 * related resources (include); for a deletion the deleted resource tagged
 * DELETE. Undefined for a version that is gone.
 */
async function notificationBodies(context: DispatchContext, target: Target, events: BatchEvent[]): Promise<(NotificationBody | undefined)[]> {
  const versions = await context.db
    .selectFrom('fhir.resource_history')
    .select(['resource_type', 'id', 'version_id', 'content', 'last_updated'])
    .where((eb) => eb(eb.refTuple('resource_type', 'id', 'version_id'), 'in', events.map((event) => eb.tuple(event.resourceType, event.resourceId, event.versionId))))
    .execute();
  const versionOf = new Map(versions.map((version) => [versionKey(version.resource_type, version.id, version.version_id), version]));
  return Promise.all(
    events.map(async (event) => {
      const version = versionOf.get(versionKey(event.resourceType, event.resourceId, event.versionId));
      if (version === undefined) return undefined;
      const resource = version.content;
      if (event.deleted) {
        const meta = (resource.meta ?? {}) as { tag?: unknown[] };
        const tagSystem = `${context.baseUrl}/fhir/resources/NamingSystem/${context.namingSystem}`;
        return { body: { ...resource, meta: { ...meta, tag: [...(meta.tag ?? []), { system: tagSystem, code: 'DELETE' }] } }, committedAt: version.last_updated };
      }
      return { body: await withIncludes(context, target, resource), committedAt: version.last_updated };
    }),
  );
}

const versionKey = (resourceType: string, id: string, versionId: number) => `${resourceType}/${id}/${versionId}`;

async function withIncludes(context: DispatchContext, target: Target, resource: FhirResource): Promise<unknown> {
  const { include, revinclude } = resolveIncludes(target.compiled);
  if (include.length === 0 && revinclude.length === 0) return resource;
  const entry = (mode: 'match' | 'include') => (item: FhirResource) => ({
    fullUrl: `${context.baseUrl}/fhir/resources/${item.resourceType}/${item.id}`,
    resource: item,
    search: { mode },
  });
  const bundle = (entries: unknown[]) => ({ resourceType: 'Bundle', id: randomUUID(), type: 'searchset', total: 1, entry: [entry('match')(resource), ...entries] });
  try {
    return bundle((await includedResources(context.db, [resource], include, revinclude)).map(entry('include')));
  } catch (error) {
    // Includes past the bounds of one answer: the event still goes, saying why it comes without them.
    if (!(error instanceof FhirError)) throw error;
    return bundle([{ resource: error.outcome, search: { mode: 'outcome' } }]);
  }
}
