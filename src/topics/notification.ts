import { randomUUID } from 'node:crypto';
import type { Db } from '../db/database.ts';
import type { FhirResource, SubscriptionStatus } from '../db/schema.ts';
import { FhirError } from '../fhir/outcome.ts';
import { resolveIncludes } from '../search/criteria.ts';
import { includedResources } from '../search/search.ts';
import type { PayloadContent } from '../db/schema.ts';
import { backport } from './backport.ts';
import type { TopicShape } from './compile.ts';

/**
 * What a topic-based subscription is sent and answered, as the Backport IG
 * shapes it on R4: a status (a Parameters resource of the
 * backport-subscription-status-r4 profile), alone (handshake, heartbeat,
 * $status) or first in a history Bundle with the events' resources.
 */

export type NotificationType = 'handshake' | 'heartbeat' | 'event-notification' | 'query-status' | 'query-event';

/** A subscription as its statuses name it. */
export type StatusSubject = {
  /** The FHIR base the service's URLs start with ({BASE_URL}/fhir/resources). */
  serviceBase: string;
  subscriptionId: string;
  /** The topic's canonical URL. */
  topicUrl: string;
  payloadContent: PayloadContent;
  status: SubscriptionStatus;
};

const subscriptionUrl = (subject: StatusSubject) => `${subject.serviceBase}/Subscription/${subject.subscriptionId}`;
const resourceUrl = (subject: StatusSubject, resourceType: string, id: string) => `${subject.serviceBase}/${resourceType}/${id}`;

/** One event as a notification tells it. */
export type TopicEvent = {
  eventNumber: number;
  /** When the version that made the event was written (its lastUpdated). */
  timestamp: string;
  resourceType: string;
  resourceId: string;
  versionId: number;
  deleted: boolean;
  /** The version's content (full-resource only; none for a deletion). */
  resource?: FhirResource;
  /** The notification shape's includes of the focus (full-resource only). */
  additionalContext?: FhirResource[];
};

/**
 * The status Parameters. `eventsSinceSubscriptionStart` counts every event
 * the subscription has had, those described included. With `empty` content
 * the events carry no references and the topic is left out (the IG: SHOULD
 * NOT), so that nothing in the notification says what changed.
 */
export function statusParameters(
  subject: StatusSubject,
  type: NotificationType,
  eventsSinceSubscriptionStart: number,
  events: TopicEvent[],
  error?: string,
): FhirResource {
  const withReferences = subject.payloadContent !== 'empty';
  return {
    resourceType: 'Parameters',
    id: randomUUID(),
    meta: { profile: [backport.statusProfile] },
    parameter: [
      { name: 'subscription', valueReference: { reference: subscriptionUrl(subject) } },
      ...(withReferences ? [{ name: 'topic', valueCanonical: subject.topicUrl }] : []),
      { name: 'status', valueCode: subject.status },
      { name: 'type', valueCode: type },
      { name: 'events-since-subscription-start', valueString: String(eventsSinceSubscriptionStart) },
      ...events.map((event) => ({
        name: 'notification-event',
        part: [
          { name: 'event-number', valueString: String(event.eventNumber) },
          { name: 'timestamp', valueInstant: event.timestamp },
          ...(withReferences ? [{ name: 'focus', valueReference: { reference: resourceUrl(subject, event.resourceType, event.resourceId) } }] : []),
          ...(withReferences
            ? (event.additionalContext ?? []).map((item) => ({
                name: 'additional-context',
                valueReference: { reference: resourceUrl(subject, item.resourceType, item.id!) },
              }))
            : []),
        ],
      })),
      ...(error === undefined ? [] : [{ name: 'error', valueCodeableConcept: { text: error } }]),
    ],
  };
}

/**
 * A notification: a history Bundle whose first entry is the status, as the
 * answer to GET {subscription}/$status, then, unless the content is `empty`,
 * one entry per event's focus (two events of one resource are two entries:
 * two versions) and one per additional resource, each with its fullUrl, the
 * request that made it and the answer (the resource itself only with
 * `full-resource`, and never for a deletion).
 */
export function notificationBundle(status: FhirResource, subject: StatusSubject, events: TopicEvent[]): FhirResource {
  const foci = events.map((event) => focusEntry(event, subject));
  // A resource that is a focus, or another event's context too, is shown once.
  const shown = new Set(foci.map((entry) => entry.fullUrl));
  const context = events.flatMap((event) => contextEntries(event, subject)).filter((entry) => !shown.has(entry.fullUrl) && shown.add(entry.fullUrl));
  const entries = subject.payloadContent === 'empty' ? [] : [...foci, ...context];
  return {
    resourceType: 'Bundle',
    id: randomUUID(),
    type: 'history',
    timestamp: new Date().toISOString(),
    entry: [
      {
        fullUrl: `urn:uuid:${status.id as string}`,
        resource: status,
        request: { method: 'GET', url: `${subscriptionUrl(subject)}/$status` },
        response: { status: '200' },
      },
      ...entries,
    ],
  };
}

/**
 * An event notification of one or more events (at most the subscription's
 * max-count), in event-number order: one `notification-event` each, its
 * focus and additional context as entries, and
 * `events-since-subscription-start` the last event's number (the IG: the
 * events so far, those of this notification included).
 */
export function eventNotification(subject: StatusSubject, events: TopicEvent[]): FhirResource {
  return notificationBundle(statusParameters(subject, 'event-notification', events.at(-1)!.eventNumber, events), subject, events);
}

type Entry = { fullUrl: string; resource?: FhirResource; request: { method: string; url: string }; response: { status: string; etag?: string } };

function focusEntry(event: TopicEvent, subject: StatusSubject): Entry {
  const path = `${event.resourceType}/${event.resourceId}`;
  const [method, url, status] = event.deleted ? ['DELETE', path, '204'] : event.versionId === 1 ? ['POST', event.resourceType, '201'] : ['PUT', path, '200'];
  return {
    fullUrl: resourceUrl(subject, event.resourceType, event.resourceId),
    ...(subject.payloadContent === 'full-resource' && event.resource !== undefined && !event.deleted ? { resource: event.resource } : {}),
    request: { method, url },
    response: { status, ...(event.deleted ? {} : { etag: `W/"${event.versionId}"` }) },
  };
}

function contextEntries(event: TopicEvent, subject: StatusSubject): Entry[] {
  return (event.additionalContext ?? []).map((item) => ({
    fullUrl: resourceUrl(subject, item.resourceType, item.id!),
    resource: item,
    request: { method: 'GET', url: `${item.resourceType}/${item.id!}` },
    response: { status: '200' },
  }));
}

/** An event of the log with the version it names, as fhir.resource_history holds it. */
export type LoggedEvent = Omit<TopicEvent, 'timestamp' | 'resource' | 'additionalContext'> & { content: FhirResource | undefined; lastUpdated: Date };

/**
 * Events as a notification (or $events) tells them: with full-resource, each
 * version's content and the notification shape's includes of it, read now.
 * Includes past the bounds of one answer are left out (`leftOut` says why):
 * the event still goes.
 */
export async function describeEvents(
  db: Db,
  shapes: TopicShape[],
  content: PayloadContent,
  events: LoggedEvent[],
  leftOut: (reason: string) => void,
): Promise<TopicEvent[]> {
  return Promise.all(
    events.map(async ({ content: resource, lastUpdated, ...event }) => {
      const described: TopicEvent = { ...event, timestamp: lastUpdated.toISOString() };
      if (content !== 'full-resource' || event.deleted || resource === undefined) return described;
      return { ...described, resource, additionalContext: await additionalContext(db, shapes, resource, leftOut) };
    }),
  );
}

async function additionalContext(db: Db, shapes: TopicShape[], focus: FhirResource, leftOut: (reason: string) => void): Promise<FhirResource[]> {
  const shape = shapes.find((candidate) => candidate.resourceType === focus.resourceType);
  if (shape === undefined || (shape.include.length === 0 && shape.revinclude.length === 0)) return [];
  const { include, revinclude } = resolveIncludes(shape);
  try {
    return await includedResources(db, [focus], include, revinclude);
  } catch (error) {
    if (!(error instanceof FhirError)) throw error;
    leftOut(error.message);
    return [];
  }
}
