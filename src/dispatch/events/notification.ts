import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import type { Db } from '../../db/database.ts';
import type { FhirResource } from '../../db/schema.ts';
import { FhirError } from '../../fhir/outcome.ts';
import { resolveIncludes } from '../../search/criteria.ts';
import { includedResources } from '../../search/search.ts';
import { countRefusals, deactivate } from '../../subscriptions/state.ts';
import { describeEvents, eventNotification } from '../../topics/notification.ts';
import {
  attemptRecord,
  call,
  countCalls,
  describeFailure,
  retryDelay,
  statusSubject,
  type AttemptOutcome,
  type DispatchContext,
  type Target,
  type TopicTarget,
} from '../delivery.ts';
import { ShutdownAbort, type CallResult } from '../../channels/channel.ts';
import { eventKey, type VersionEvent } from '../tasks/jobs.ts';
import { nextCallAt, settleClaim, type AttemptRow, type Claim, type ClaimedEvent, type EventOutcome } from './log.ts';

/**
 * Batches of one subscription a sender sends without releasing it
 * (webhook.claim_more_subscription_events): a retry that comes due meanwhile,
 * which only a new claim takes, waits for at most this many.
 */
const maxBatchesPerClaim = 10;

/** Events of the claimed subscription with the versions they name, and whether due events were left out of them (the claim's moreDue). */
export type Batch = { events: ClaimedEvent[]; versions: Versions; moreDue: boolean };

/**
 * The claimed subscription's next due events after the event given (none
 * when the claim ends). Asked while the batch ending with that event is
 * sent, when every batch before it is done with: the sender counts the
 * bytes its batches hold by these calls (src/dispatch/events/sender.ts).
 */
export type ClaimMore = (afterEventId: string) => Promise<Batch>;

/**
 * A claim's delivery: the events of one active subscription, in log order,
 * as notifications (one event each, or up to a topic-based subscription's
 * max-count: notificationsOf), at most `target.parallelCalls` calls in
 * flight to the subscriber (one at a time, in event-number order, for a
 * topic-based subscription that does not ask for more). The claim has
 * already set aside the versions the subscriber must not get (an older one
 * after a newer) and numbered the rest. While a full batch is sent, the
 * subscription's next events are claimed (`claimMore`), and sent as soon as
 * the batch's calls are done, while the batch is recorded: a long stream
 * does not wait between batches.
 *
 * A call's answer decides every event it carries. Attempts are counted per
 * event (the events of one notification have the same count): a retryable
 * failure is tried again with jittered spacing, up to DELIVERY_MAX_FAILURES
 * attempts, and the last one failing deactivates the subscription; a
 * permanent one ends the notification's events and counts one more
 * notification in a row refused for good (DELIVERY_MAX_FAILURES of them
 * deactivate). After a retryable failure no new call starts: the subscriber
 * is likely down, and the events not yet sent wait for the retry with the
 * failed ones; after any failure the claim ends with its batch. Each batch
 * is recorded in one statement when all went well, else in one transaction
 * with the state changes that follow, the claim released.
 */
export async function deliverClaim(
  context: DispatchContext,
  senderId: string,
  claim: Claim,
  target: Target,
  versions: Versions,
  { signal, claimMore, failing }: { signal?: AbortSignal; claimMore?: ClaimMore; failing?: FailingSubscribers } = {},
): Promise<void> {
  let batch: Batch = { events: claim.events, versions, moreDue: claim.moreDue };
  let recorded = Promise.resolve();
  const pacer = target.maxCallsPerSecond === undefined ? undefined : await Pacer.resume(context.db, target.id, target.maxCallsPerSecond);
  try {
    for (let round = 1; ; round += 1) {
      // A batch that left due events out (maxEventsPerClaim, or the sender's bytes) has more behind it: asked for now, and sent after this one (the same resources' newer versions among them).
      const following = claimMore !== undefined && batch.moreDue && round < maxBatchesPerClaim ? claimMore(batch.events.at(-1)!.eventId) : undefined;
      following?.catch(() => undefined);
      const notifications = await notificationsOf(context, target, batch.events, batch.versions);
      const probing = failing?.has(target.id) === true || batch.events.some((event) => event.attempts > 0);
      const results = await send(context, target, notifications, { pacer, probing, signal });
      const verdict = judge(context, target, notifications, results);
      failing?.record(target.id, verdict);
      const next = following !== undefined && withoutFailures(verdict) && signal?.aborted !== true ? await following.catch(() => undefined) : undefined;
      const goingOn = next !== undefined && next.events.length > 0;
      // Batches are recorded in order: the release comes after every batch before it.
      await recorded;
      recorded = settle(context, senderId, target, verdict, { keepClaim: goingOn, nextCallAt: pacer?.nextCallAt });
      observeLatencies(context, notifications, results);
      if (!goingOn) return await recorded;
      // Awaited before the next batch is recorded; a failure then fails the claim.
      recorded.catch(() => undefined);
      batch = next;
    }
  } catch (error) {
    // The batch before is recorded (or has failed) before the caller releases the claim: a release first would let another sender take its events again.
    await recorded.catch(() => undefined);
    throw error;
  }
}

/**
 * The subscribers whose last calls from this sender failed and were to be
 * retried (a retryable failure), until one is delivered: their next batch
 * starts with one call (send's `probing`). Without it, a subscriber that
 * hangs was probed with one call only for its retries, and its new events
 * went DELIVERY_PARALLEL_CALLS at a time, each holding a place at its origin
 * until the response timeout.
 */
export class FailingSubscribers {
  private readonly ids = new Set<string>();

  has(subscriptionId: string): boolean {
    return this.ids.has(subscriptionId);
  }

  record(subscriptionId: string, verdict: Verdict): void {
    if (verdict.retried > 0 || verdict.exhausted !== undefined) {
      // Bounded: past this many, the oldest are forgotten (probed at their next retry still).
      if (this.ids.size >= 10_000) this.ids.delete(this.ids.values().next().value!);
      this.ids.add(subscriptionId);
    } else if (verdict.delivered) this.ids.delete(subscriptionId);
  }
}

function withoutFailures(verdict: Verdict): boolean {
  return verdict.retried === 0 && verdict.exhausted === undefined && verdict.lastRefusal === undefined;
}

/** Commit to delivery, for each event delivered: from its version's lastUpdated to the subscriber's answer. */
function observeLatencies(context: DispatchContext, notifications: Notification[], results: Sent[]): void {
  for (const [index, result] of results.entries()) {
    if (typeof result === 'string' || result.verdict !== 'delivered') continue;
    const answeredAt = new Date(result.startedAt.getTime() + result.durationMs);
    for (const committedAt of notifications[index]!.committedAt) context.metrics.delivered(committedAt, answeredAt);
  }
}

/**
 * Spaces a throttled subscription's calls 1/rate apart, across the lanes and
 * batches of one claim, from where the sender before it left off
 * (webhook.subscription_streams.next_call_at): the limit holds whichever
 * worker process sends. A subscription idle for a while gets its next call
 * at once, then the spacing again.
 */
class Pacer {
  private next: number;
  private readonly intervalMs: number;
  private constructor(intervalMs: number, startAt: number) {
    this.intervalMs = intervalMs;
    this.next = startAt;
  }

  static async resume(db: Db, subscriptionId: string, callsPerSecond: number): Promise<Pacer> {
    const leftAt = await nextCallAt(db, subscriptionId);
    return new Pacer(1000 / callsPerSecond, Math.max(Date.now(), leftAt?.getTime() ?? 0));
  }

  /** Waits for the next call's slot (reserved at once, so that lanes take turns); false when a shutdown cut the wait short. */
  async slot(signal?: AbortSignal): Promise<boolean> {
    const at = Math.max(Date.now(), this.next);
    this.next = at + this.intervalMs;
    const wait = at - Date.now();
    if (wait <= 0) return true;
    try {
      await sleep(wait, undefined, signal === undefined ? {} : { signal });
      return true;
    } catch {
      return false;
    }
  }

  /** The earliest the call after the last one reserved may start. */
  get nextCallAt(): Date {
    return new Date(this.next);
  }
}

/** What became of each notification: its call's result, `gone` (its version was deleted), or `unsent`. */
type Sent = CallResult | 'gone' | 'unsent';

/**
 * Calls the subscriber for each notification (its body undefined: gone, not sent), in the claim's order, at most
 * `target.parallelCalls` at once: each lane starts its next call once its
 * last one was answered. With one lane (a topic-based subscription's
 * default) the subscriber gets the calls one after the other, in event-number
 * order. Stops starting calls after a retryable failure, or when the worker
 * shuts down (the call cut short counts as not sent).
 *
 * When `probing` (the subscriber failed lately: FailingSubscribers, or a retry in the batch), one
 * call goes first and the other lanes open only once it was answered without
 * a retryable failure: a subscriber that hangs holds one connection to its
 * origin, not DELIVERY_PARALLEL_CALLS, and healthy subscribers there keep
 * theirs (DELIVERY_MAX_CONNECTIONS_PER_ORIGIN).
 */
async function send(
  context: DispatchContext,
  target: Target,
  notifications: Notification[],
  { pacer, probing, signal }: { pacer: Pacer | undefined; probing: boolean; signal: AbortSignal | undefined },
): Promise<Sent[]> {
  const results: Sent[] = notifications.map(() => 'unsent');
  let next = 0;
  let stop = false;
  const lane = async (calls = Number.POSITIVE_INFINITY): Promise<void> => {
    let called = 0;
    while (called < calls && !stop && next < notifications.length) {
      const index = next++;
      const { body, message, lastEventNumber } = notifications[index]!;
      if (body === undefined) {
        results[index] = 'gone';
        continue;
      }
      // A throttled subscriber's call waits for its slot; a shutdown meanwhile leaves it unsent.
      if (pacer !== undefined && !(await pacer.slot(signal))) {
        stop = true;
        return;
      }
      let result: CallResult;
      called += 1;
      try {
        result = await call(context, target, { body, message, type: 'event-notification', lastEventNumber }, signal);
      } catch (error) {
        if (!(error instanceof ShutdownAbort)) throw error;
        stop = true;
        return;
      }
      results[index] = result;
      if (result.verdict === 'retryable') stop = true;
    }
  };
  if (probing) await lane(1);
  await Promise.all(Array.from({ length: Math.min(target.parallelCalls, notifications.length) }, () => lane()));
  return results;
}

/** An event and the failed call that decides something about it. */
type Failure = { event: ClaimedEvent; result: CallResult };

/** What a claim's calls come to, before anything is written. */
type Verdict = {
  outcomes: EventOutcome[];
  /** One row per event a call carried: a call of N events is N rows, with the same start, answer and outcome. */
  records: AttemptRow[];
  /** One row per call (its first event's): what the call metrics count. */
  calls: AttemptRow[];
  /** Events to try again after a failed call. */
  retried: number;
  /** The first event whose last attempt failed: it deactivates the subscription. */
  exhausted: Failure | undefined;
  /** The first event of the last notification refused for good, and how many notifications were refused after the claim's last delivery. */
  lastRefusal: Failure | undefined;
  trailingRefusals: number;
  delivered: boolean;
};

function judge(context: DispatchContext, target: Target, notifications: Notification[], results: Sent[]): Verdict {
  const verdict: Verdict = { outcomes: [], records: [], calls: [], retried: 0, exhausted: undefined, lastRefusal: undefined, trailingRefusals: 0, delivered: false };
  // Events not sent after a retryable failure wait as long as the longest retry; after a shutdown, not at all.
  let unsentWaitMs = 0;
  const unsent: ClaimedEvent[] = [];
  for (const [index, { events }] of notifications.entries()) {
    const result = results[index]!;
    const first = events[0]!;
    const outcome = (status: EventOutcome['status'], notBefore: Date | null = null) => {
      for (const event of events) verdict.outcomes.push({ eventId: event.eventId, status, attempts: status === 'gone' ? event.attempts : event.attempts + 1, notBefore });
    };
    const record = (callResult: CallResult, recorded: AttemptOutcome) => {
      const rows = events.map((event) => attemptRecord(target.id, 'notification', event, event.attempts + 1, callResult, recorded));
      verdict.records.push(...rows);
      verdict.calls.push(rows[0]!);
    };
    if (result === 'gone') {
      context.logger.warn({ subscriptionId: target.id, event: eventKey(first) }, 'the resource version of a notification is gone; nothing to deliver');
      outcome('gone');
    } else if (result === 'unsent') {
      unsent.push(...events);
    } else if (result.verdict === 'delivered') {
      record(result, 'delivered');
      outcome('delivered');
      verdict.delivered = true;
      verdict.trailingRefusals = 0;
    } else if (result.verdict === 'retryable') {
      // One delay for the notification, so that its events come due together and are sent again as one; jittered, so that a blip of the subscriber does not fail several notifications at once.
      const delay = retryDelay(context, Math.max(...events.map((event) => event.attempts)) + 1, result);
      if (delay === undefined) {
        verdict.exhausted ??= { event: first, result };
        outcome('failed');
      } else {
        outcome('pending', new Date(Date.now() + delay));
        verdict.retried += events.length;
        unsentWaitMs = Math.max(unsentWaitMs, delay);
      }
      record(result, delay === undefined ? 'failed' : 'retrying');
    } else {
      // A permanent failure (a 4xx but 429, a refused address) ends the notification's events at once: one refusal.
      record(result, 'failed');
      outcome('failed');
      verdict.lastRefusal = { event: first, result };
      verdict.trailingRefusals += 1;
    }
  }
  for (const event of unsent) verdict.outcomes.push({ eventId: event.eventId, status: 'pending', attempts: event.attempts, notBefore: unsentWaitMs > 0 ? new Date(Date.now() + unsentWaitMs) : null });
  if (unsentWaitMs > 0) verdict.retried += unsent.length;
  return verdict;
}

/**
 * Records a batch's calls and outcomes and releases the claim (unless
 * `keepClaim`, which only a batch without failures is given): in one
 * statement when nothing failed (the common path), else in one transaction
 * with the count of refusals and the deactivation, when it comes to that.
 */
async function settle(
  context: DispatchContext,
  senderId: string,
  target: Target,
  verdict: Verdict,
  { keepClaim, nextCallAt }: { keepClaim: boolean; nextCallAt: Date | undefined },
): Promise<void> {
  const { records, calls, outcomes, exhausted, lastRefusal } = verdict;
  const claim = { senderId, subscriptionId: target.id };
  if (withoutFailures(verdict)) {
    await settleClaim(context.db, claim, outcomes, records, { resetFailureCount: verdict.delivered, keepClaim, nextCallAt });
    countCalls(context, calls);
    return;
  }
  const deactivation = await context.db.transaction().execute(async (db) => {
    await settleClaim(db, claim, outcomes, records, { resetFailureCount: false, nextCallAt });
    const refusedInARow = await countRefusals(db, target.id, verdict);
    const deactivating = exhausted ?? (refusedInARow !== undefined && refusedInARow >= context.delivery.maxFailures ? lastRefusal : undefined);
    // The subscription goes to error: its pending events are abandoned with it (a trigger), like any later event.
    return deactivating === undefined ? undefined : deactivateFor(db, target, deactivating.event, deactivating.result);
  });
  countCalls(context, calls);
  if (deactivation !== undefined) {
    context.metrics.deactivated();
    const resourceUrl = `${context.baseUrl}/fhir/resources/${deactivation.resource}`;
    context.logger.warn({ subscriptionId: target.id, reason: deactivation.reason, resourceUrl }, 'subscription deactivated after repeated delivery failures');
  } else if (verdict.retried > 0) {
    context.metrics.retryScheduled('notification', verdict.retried);
    context.logger.info({ subscriptionId: target.id, events: verdict.retried }, 'notifications failed; retrying');
  }
}

/**
 * Deactivates with a reason naming the event not delivered (the resource the
 * alert links to); what happened, for the caller to count and log once
 * committed, or undefined when the subscription was no longer active.
 */
async function deactivateFor(db: Db, target: Target, event: VersionEvent, result: CallResult): Promise<{ reason: string; resource: string } | undefined> {
  const reason = `${describeFailure(result, target.endpoint)}; ${event.resourceType}/${event.resourceId} (version ${event.versionId}) was not delivered`;
  if ((await deactivate(db, target.id, reason, target.contactEmails)) === undefined) return undefined;
  return { reason, resource: `${event.resourceType}/${event.resourceId}` };
}

/** Resource versions by eventKey, as fhir.resource_history holds them. */
export type Versions = Map<string, { content: FhirResource; lastUpdated: Date }>;

/**
 * The versions the events name, in one query (for all the claims of a
 * sender's claim at once): the keys as three arrays joined to the history's
 * primary key, each version once however many subscriptions its events are
 * for. Not a row-value IN list: PostgreSQL 15 planned 100 tuples of it at
 * 7 ms alone and 43 ms under a drain's concurrency, most of the drain's
 * time, where the join takes 3 ms; one statement text, whatever the count.
 */
export async function loadVersions(db: Db, events: VersionEvent[]): Promise<Versions> {
  if (events.length === 0) return new Map();
  const { rows } = await sql<{ resource_type: string; id: string; version_id: number; content: FhirResource; last_updated: Date }>`
    SELECT h.resource_type, h.id, h.version_id, h.content, h.last_updated
    FROM (SELECT DISTINCT * FROM unnest(${events.map((event) => event.resourceType)}::text[], ${events.map((event) => event.resourceId)}::text[], ${events.map((event) => event.versionId)}::int[])
            AS key (resource_type, id, version_id)) wanted
    JOIN fhir.resource_history h USING (resource_type, id, version_id)`.execute(db);
  return new Map(rows.map((row) => [eventKey({ resourceType: row.resource_type, resourceId: row.id, versionId: row.version_id }), { content: row.content, lastUpdated: row.last_updated }]));
}

/**
 * The versions of these events, out of versions loaded for more (a sender's
 * claim of several subscriptions, read in one query): each batch keeps only
 * its own, so that once it is sent they can be collected, while the other
 * subscriptions of its claim are still being sent to. A version several
 * batches name is held once, by all of them.
 */
export function versionsOf(events: VersionEvent[], loaded: Versions): Versions {
  const versions: Versions = new Map();
  for (const event of events) {
    const key = eventKey(event);
    const version = loaded.get(key);
    if (version !== undefined) versions.set(key, version);
  }
  return versions;
}

/**
 * What one call carries: its events (one, or a topic-based subscription's
 * run of them), its body (undefined when the version of its one event is
 * gone: nothing to send), when each event's version was committed (its
 * lastUpdated), and what the Standard Webhooks webhook-id is made of (the
 * same for every retry of the notification).
 */
type Notification = { events: ClaimedEvent[]; body: unknown; committedAt: Date[]; message: string; lastEventNumber: number | null };

/**
 * A batch's events as the notifications that carry them, in the batch's
 * order. A classic subscription's event is a notification of its own: the
 * resource version itself; for _include/_revinclude criteria a searchset
 * Bundle with it (match) and its related resources (include); for a
 * deletion the deleted resource tagged DELETE. A topic-based subscription's
 * events go as the Backport IG's notifications of up to its max-count events
 * each (topicRuns).
 */
async function notificationsOf(context: DispatchContext, target: Target, events: ClaimedEvent[], versions: Versions): Promise<Notification[]> {
  const { topic } = target;
  const runs = topic === undefined ? events.map((event) => [event]) : topicRuns(events, versions, topic.maxCount);
  return Promise.all(
    runs.map(async (run): Promise<Notification> => {
      const present = run.map((event) => versions.get(eventKey(event)));
      const message = run.length === 1 ? eventKey(run[0]!) : `event-numbers ${run[0]!.eventNumber}-${run.at(-1)!.eventNumber}`;
      // A run is in number order: its last event's is the highest.
      const lastEventNumber = topic === undefined ? null : run.at(-1)!.eventNumber;
      if (present.some((version) => version === undefined)) return { events: run, body: undefined, committedAt: [], message, lastEventNumber };
      const found = present as { content: FhirResource; lastUpdated: Date }[];
      const committedAt = found.map((version) => version.lastUpdated);
      if (topic !== undefined) return { events: run, body: await topicNotification(context, target, topic, run, found), committedAt, message, lastEventNumber };
      const [event] = run;
      const resource = found[0]!.content;
      if (event!.deleted) {
        const meta = (resource.meta ?? {}) as { tag?: unknown[] };
        const tagSystem = `${context.baseUrl}/fhir/resources/NamingSystem/${context.namingSystem}`;
        return { events: run, body: { ...resource, meta: { ...meta, tag: [...(meta.tag ?? []), { system: tagSystem, code: 'DELETE' }] } }, committedAt, message, lastEventNumber };
      }
      return { events: run, body: await withIncludes(context, target, resource), committedAt, message, lastEventNumber };
    }),
  );
}

/**
 * A topic-based subscription's events grouped into notifications, in the
 * claim's order (which is event-number order: numbers are given in log
 * order, and a retried or resent event keeps its lower one). A notification
 * carries at most `maxCount` events, and only a run of consecutive numbers
 * with the same count of attempts: the events of a notification that
 * failed are retried together (they come due together), and fresh events
 * written meanwhile do not join them, so a retry carries the same events
 * (unless the sender's byte bound now cuts its claim shorter); an event
 * resent on request, or one after a gap, starts a notification of its own.
 * An event whose version is gone is alone (nothing is sent for it). A
 * notification never spans two batches: the claim's 100 events and its
 * bytes (DELIVERY_MAX_CLAIMED_BYTES) bound it too.
 */
function topicRuns(events: ClaimedEvent[], versions: Versions, maxCount: number): ClaimedEvent[][] {
  const runs: ClaimedEvent[][] = [];
  let open: ClaimedEvent[] | undefined;
  for (const event of events) {
    const last = open?.at(-1);
    const sendable = versions.has(eventKey(event));
    if (open !== undefined && last !== undefined && sendable && open.length < maxCount && event.eventNumber === last.eventNumber + 1 && event.attempts === last.attempts) {
      open.push(event);
      continue;
    }
    const run = [event];
    runs.push(run);
    open = sendable ? run : undefined;
  }
  return runs;
}

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

/**
 * A topic-based subscription's notification of a run of its events
 * (topicRuns): their numbers, and as much of each as the payload content
 * says.
 */
async function topicNotification(
  context: DispatchContext,
  target: Target,
  topic: TopicTarget,
  events: ClaimedEvent[],
  versions: { content: FhirResource; lastUpdated: Date }[],
): Promise<unknown> {
  const leftOut = (reason: string) => context.logger.warn({ subscriptionId: target.id, reason }, 'a notification goes without its additional context');
  const described = await describeEvents(
    context.db,
    topic.shapes,
    topic.payloadContent,
    events.map((event, index) => ({ ...event, ...versions[index]! })),
    leftOut,
  );
  return eventNotification(statusSubject(context, target, topic), described);
}
