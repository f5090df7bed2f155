import { randomUUID } from 'node:crypto';
import type { FhirResource, SubscriptionStatus } from '../db/schema.ts';
import { backport, type PayloadContent } from './backport.ts';

/**
 * What a topic-based subscription is sent and answered, as the Backport IG
 * shapes it on R4: a status (a Parameters resource of the
 * backport-subscription-status-r4 profile), alone (handshake, heartbeat,
 * $status) or first in a history Bundle with the events' resources.
 */

export type NotificationType = 'handshake' | 'heartbeat' | 'event-notification' | 'query-status' | 'query-event';

/** A subscription as its statuses name it. */
export type StatusSubject = {
  /** The subscription's absolute URL ({base}/fhir/resources/Subscription/{id}). */
  subscriptionUrl: string;
  /** The topic's canonical URL. */
  topicUrl: string;
  payloadContent: PayloadContent;
  status: SubscriptionStatus;
};

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
  resourceUrl: (resourceType: string, id: string) => string,
  error?: string,
): FhirResource {
  const withReferences = subject.payloadContent !== 'empty';
  return {
    resourceType: 'Parameters',
    id: randomUUID(),
    meta: { profile: [backport.statusProfile] },
    parameter: [
      { name: 'subscription', valueReference: { reference: subject.subscriptionUrl } },
      ...(withReferences ? [{ name: 'topic', valueCanonical: subject.topicUrl }] : []),
      { name: 'status', valueCode: subject.status },
      { name: 'type', valueCode: type },
      { name: 'events-since-subscription-start', valueString: String(eventsSinceSubscriptionStart) },
      ...events.map((event) => ({
        name: 'notification-event',
        part: [
          { name: 'event-number', valueString: String(event.eventNumber) },
          { name: 'timestamp', valueInstant: event.timestamp },
          ...(withReferences ? [{ name: 'focus', valueReference: { reference: resourceUrl(event.resourceType, event.resourceId) } }] : []),
          ...(withReferences
            ? (event.additionalContext ?? []).map((item) => ({ name: 'additional-context', valueReference: { reference: resourceUrl(item.resourceType, item.id!) } }))
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
 * one entry per event's focus and per additional resource, each with its
 * fullUrl, the request that made it and the answer (the resource itself only
 * with `full-resource`, and never for a deletion).
 */
export function notificationBundle(status: FhirResource, subject: StatusSubject, events: TopicEvent[], resourceUrl: (resourceType: string, id: string) => string): FhirResource {
  const entries = subject.payloadContent === 'empty' ? [] : uniqueEntries(events.flatMap((event) => eventEntries(event, subject.payloadContent, resourceUrl)));
  return {
    resourceType: 'Bundle',
    id: randomUUID(),
    type: 'history',
    timestamp: new Date().toISOString(),
    entry: [
      {
        fullUrl: `urn:uuid:${status.id as string}`,
        resource: status,
        request: { method: 'GET', url: `${subject.subscriptionUrl}/$status` },
        response: { status: '200' },
      },
      ...entries,
    ],
  };
}

type Entry = { fullUrl: string; resource?: FhirResource; request: { method: string; url: string }; response: { status: string; etag?: string } };

function eventEntries(event: TopicEvent, content: PayloadContent, resourceUrl: (resourceType: string, id: string) => string): Entry[] {
  const path = `${event.resourceType}/${event.resourceId}`;
  const [method, url, status] = event.deleted ? ['DELETE', path, '204'] : event.versionId === 1 ? ['POST', event.resourceType, '201'] : ['PUT', path, '200'];
  const focus: Entry = {
    fullUrl: resourceUrl(event.resourceType, event.resourceId),
    ...(content === 'full-resource' && event.resource !== undefined && !event.deleted ? { resource: event.resource } : {}),
    request: { method, url },
    response: { status, ...(event.deleted ? {} : { etag: `W/"${event.versionId}"` }) },
  };
  const context = (event.additionalContext ?? []).map((item) => ({
    fullUrl: resourceUrl(item.resourceType, item.id!),
    resource: item,
    request: { method: 'GET', url: `${item.resourceType}/${item.id!}` },
    response: { status: '200' },
  }));
  return [focus, ...context];
}

/** One entry per resource: a resource that is an event's focus and another's context is shown once (the first). */
function uniqueEntries(entries: Entry[]): Entry[] {
  const seen = new Set<string>();
  return entries.filter((entry) => !seen.has(entry.fullUrl) && seen.add(entry.fullUrl));
}
