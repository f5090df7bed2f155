import { randomUUID } from 'node:crypto';
import type { FhirResource } from '../../../db/schema.ts';
import { FhirError } from '../../../fhir/outcome.ts';
import { resolveIncludes } from '../../../search/criteria.ts';
import { includedResources } from '../../../search/search.ts';
import { describeEvents, eventNotification } from '../../../topics/notification.ts';
import { statusSubject, type DispatchContext, type Target, type TopicTarget } from '../../subscriber.ts';
import { eventKey } from '../../../db/jobs.ts';
import { channelOf } from '../../../channels/registry.ts';
import type { ClaimedEvent } from '../../../db/sql/claim-subscription-events.ts';
import type { Versions } from './versions.ts';

/**
 * The build stage of a claim's delivery (src/dispatch/events/delivery/deliver-claim.ts):
 * a batch's events as the notifications that carry them.
 */

/**
 * What one call carries: its events (one, or a topic-based subscription's
 * run of them), its body (undefined when the version of its one event is
 * gone: nothing to send), when each event's version was committed (its
 * lastUpdated), and what the Standard Webhooks webhook-id is made of (the
 * same for every retry of the notification).
 */
export type NotificationOfEvents = { events: ClaimedEvent[]; body: unknown; committedAt: Date[]; message: string; lastEventNumber: number | null };

/**
 * A batch's events as the notifications that carry them, in the batch's
 * order. A classic subscription's event is a notification of its own: the
 * resource version itself; for _include/_revinclude criteria a searchset
 * Bundle with it (match) and its related resources (include); for a
 * deletion the deleted resource tagged DELETE. A topic-based subscription's
 * events go as the Backport IG's notifications of up to its max-count events
 * each (topicRuns), and no larger than its channel takes.
 */
export async function notificationsOf(context: DispatchContext, target: Target, events: ClaimedEvent[], versions: Versions): Promise<NotificationOfEvents[]> {
  const { topic } = target;
  if (topic === undefined) return Promise.all(events.map((event) => notificationOf(context, target, [event], versions)));
  const maxBodyBytes = await channelOf(target.channel).maxBodyBytes?.(context, target);
  const runs = await Promise.all(topicRuns(events, versions, topic.maxCount).map((run) => fittingNotifications(context, target, run, versions, maxBodyBytes)));
  return runs.flat();
}

/**
 * A run's notification, or, when its body is larger than its channel takes
 * (`maxBodyBytes`), the notifications of its two halves, each split again
 * until it fits: in event-number order, each event once. A single event too
 * large is left to the channel, which refuses it with its size. A retry of
 * the run splits it the same way, into the same notifications.
 */
async function fittingNotifications(
  context: DispatchContext,
  target: Target,
  run: ClaimedEvent[],
  versions: Versions,
  maxBodyBytes: number | undefined,
): Promise<NotificationOfEvents[]> {
  const notification = await notificationOf(context, target, run, versions);
  if (maxBodyBytes === undefined || run.length === 1 || notification.body === undefined) return [notification];
  if (Buffer.byteLength(JSON.stringify(notification.body)) <= maxBodyBytes) return [notification];
  const half = Math.ceil(run.length / 2);
  const halves = await Promise.all([run.slice(0, half), run.slice(half)].map((part) => fittingNotifications(context, target, part, versions, maxBodyBytes)));
  return halves.flat();
}

/** The notification of one event, or of a topic-based subscription's run of them. */
async function notificationOf(context: DispatchContext, target: Target, run: ClaimedEvent[], versions: Versions): Promise<NotificationOfEvents> {
  const { topic } = target;
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
    const body = { ...resource, meta: { ...meta, tag: [...(meta.tag ?? []), { system: tagSystem, code: 'DELETE' }] } };
    return { events: run, body, committedAt, message, lastEventNumber };
  }
  return { events: run, body: await withIncludes(context, target, resource), committedAt, message, lastEventNumber };
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
export function topicRuns(events: ClaimedEvent[], versions: Pick<Versions, 'has'>, maxCount: number): ClaimedEvent[][] {
  const runs: ClaimedEvent[][] = [];
  let open: ClaimedEvent[] | undefined;
  for (const event of events) {
    const last = open?.at(-1);
    const sendable = versions.has(eventKey(event));
    const follows = last !== undefined && event.eventNumber === last.eventNumber + 1 && event.attempts === last.attempts;
    if (open !== undefined && follows && sendable && open.length < maxCount) {
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
  const bundle = (entries: unknown[]) => ({
    resourceType: 'Bundle',
    id: randomUUID(),
    type: 'searchset',
    total: 1,
    entry: [entry('match')(resource), ...entries],
  });
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
