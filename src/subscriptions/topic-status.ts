import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import { isUuid, type FhirResource, type SubscriptionStatus } from '../db/schema.ts';
import { notFound, refusal } from '../fhir/outcome.ts';
import { formatParameters, type OperationInput } from '../fhir/parameters.ts';
import { payloadContents, type PayloadContent } from '../db/schema.ts';
import type { CompiledTopic } from '../topics/compile.ts';
import { describeEvents, notificationBundle, statusParameters, type LoggedEvent, type StatusSubject } from '../topics/notification.ts';
import { numberMissedEvents } from '../db/sql/number-missed-events.ts';
import { visibleTo, type Caller } from '../auth/api-keys.ts';
import type { SubscriptionContext } from './store.ts';

/**
 * The Backport IG's operations on topic-based subscriptions: `$status` (where
 * a subscription stands: its state, its error, how many events it has had)
 * and `$events` (the events still held, by number: how a client that saw a
 * gap in the numbers gets what it missed). A key sees the subscriptions it
 * may see elsewhere (visibleTo).
 */

/** A topic-based subscription as the operations read it. */
type TopicSubscription = {
  id: string;
  status: SubscriptionStatus;
  error: string | null;
  payload_content: PayloadContent;
  last_event_number: string;
  topic_url: string;
  topic_compiled: unknown;
};

/** At most this many subscriptions in one type-level $status: narrow with id or status. */
const maxStatuses = 1000;
/** At most this many events in one $events answer: the client asks again from the next number. */
export const maxEventsPerAnswer = 100;

function topicSubscriptions(db: Db, caller: Caller) {
  return visibleTo(
    db
      .selectFrom('webhook.subscriptions as s')
      .innerJoin('webhook.subscription_topics as topic', 'topic.id', 's.topic_id')
      .select(['s.id', 's.status', 's.error', 's.payload_content', 'topic.url as topic_url', 'topic.compiled as topic_compiled'])
      .select(sql<string>`webhook.last_event_number(s.id)`.as('last_event_number'))
      .$narrowType<{ payload_content: PayloadContent }>(),
    caller,
  );
}

function subjectOf(context: SubscriptionContext, row: TopicSubscription, payloadContent = row.payload_content): StatusSubject {
  return { serviceBase: `${context.baseUrl}/fhir/resources`, subscriptionId: row.id, topicUrl: row.topic_url, payloadContent, status: row.status };
}

/**
 * A subscription that left `active` has its missed events numbered first
 * (numberMissedEvents): what it answers counts them, and $events serves them.
 */
async function withMissedEventsNumbered(db: Db, row: TopicSubscription): Promise<TopicSubscription> {
  return row.status === 'active' ? row : { ...row, last_event_number: String(await numberMissedEvents(db, row.id)) };
}

async function findTopicSubscription(db: Db, caller: Caller, id: string): Promise<TopicSubscription> {
  const row = isUuid(id) ? await topicSubscriptions(db, caller).where('s.id', '=', id).executeTakeFirst() : undefined;
  if (row !== undefined) return row;
  const classic = isUuid(id) ? await visibleTo(db.selectFrom('webhook.subscriptions').select('id'), caller).where('id', '=', id).executeTakeFirst() : undefined;
  if (classic !== undefined)
    throw refusal(
      `Subscription/${id} is not on a topic: $status and $events are for topic-based subscriptions (its state is its status and error, GET /Subscription/${id})`,
    );
  throw notFound(`Subscription/${id} is not known`);
}

/** The status Parameters of `row`, type query-status. */
function queryStatus(context: SubscriptionContext, row: TopicSubscription): FhirResource {
  return statusParameters(subjectOf(context, row), 'query-status', Number(row.last_event_number), [], row.error ?? undefined);
}

/** $status of one subscription, or with `input` (`id`, `status`) the type-level form: a searchset Bundle of statuses. */
export async function subscriptionStatus(
  db: Db,
  context: SubscriptionContext,
  caller: Caller,
  target: { id: string } | { input: OperationInput },
): Promise<FhirResource> {
  let rows: TopicSubscription[];
  if ('id' in target) {
    rows = [await findTopicSubscription(db, caller, target.id)];
  } else {
    const ids: string[] = [];
    const statuses: string[] = [];
    for (const [name, value] of target.input) {
      if (formatParameters.has(name)) continue;
      if (name === 'id') ids.push(...value.split(','));
      else if (name === 'status') statuses.push(...value.split(','));
      else throw refusal(`Unknown parameter '${name}' for $status (supported: id, status)`);
    }
    if (!statuses.every((status) => ['requested', 'active', 'error', 'off'].includes(status))) throw refusal('status must be requested, active, error or off');
    // An id that is not a UUID names no subscription.
    const knownIds = ids.filter(isUuid);
    rows =
      ids.length > 0 && knownIds.length === 0
        ? []
        : await topicSubscriptions(db, caller)
            .$if(knownIds.length > 0, (query) => query.where('s.id', 'in', knownIds))
            .$if(statuses.length > 0, (query) => query.where('s.status', 'in', statuses as SubscriptionStatus[]))
            .orderBy('s.created_at')
            .orderBy('s.id')
            .limit(maxStatuses + 1)
            .execute();
  }
  const shown: TopicSubscription[] = [];
  for (const row of rows.slice(0, maxStatuses)) shown.push(await withMissedEventsNumbered(db, row));
  const entry = [
    ...shown.map((row) => {
      const status = queryStatus(context, row);
      return { fullUrl: `urn:uuid:${status.id as string}`, resource: status, search: { mode: 'match' } };
    }),
    ...(rows.length > maxStatuses
      ? [
          {
            resource: information(`More than ${maxStatuses} subscriptions: the first ${maxStatuses} are shown; narrow with id or status`),
            search: { mode: 'outcome' },
          },
        ]
      : []),
  ];
  // FHIR JSON has no empty arrays: no subscription, no entry.
  return { resourceType: 'Bundle', id: randomUUID(), type: 'searchset', total: shown.length, ...(entry.length === 0 ? {} : { entry }) };
}

/**
 * $events of a subscription: a history Bundle, the status (type
 * query-event) first, then the events numbered eventsSinceNumber to
 * eventsUntilNumber (both included; by default every event held) that the
 * log still holds, at most maxEventsPerAnswer, with as much of each as
 * `content` asks (the subscription's own level by default). Numbers asked
 * for that are no longer held, or past this answer's limit, are said in an
 * OperationOutcome entry at the end.
 */
export async function subscriptionEvents(db: Db, context: SubscriptionContext, caller: Caller, id: string, input: OperationInput): Promise<FhirResource> {
  const row = await withMissedEventsNumbered(db, await findTopicSubscription(db, caller, id));
  const last = Number(row.last_event_number);
  let since: number | undefined;
  let until: number | undefined;
  let content = row.payload_content;
  for (const [name, value] of input) {
    if (formatParameters.has(name)) continue;
    if (name === 'eventsSinceNumber') since = eventNumber(name, value);
    else if (name === 'eventsUntilNumber') until = eventNumber(name, value);
    else if (name === 'content') {
      if (!(payloadContents as readonly string[]).includes(value)) throw refusal(`content must be ${payloadContents.join(', ')}`);
      content = value as PayloadContent;
    } else throw refusal(`Unknown parameter '${name}' for $events (supported: eventsSinceNumber, eventsUntilNumber, content)`);
  }
  const from = since ?? 1;
  const to = Math.min(until ?? last, last);
  const held = from > to ? [] : await heldEvents(db, row.id, from, to);
  const shown = held.slice(0, maxEventsPerAnswer);
  const outcomes: string[] = [];
  if (from <= to) {
    const missing = missingRanges(
      from,
      held.length > maxEventsPerAnswer ? shown.at(-1)!.eventNumber : to,
      shown.map((event) => event.eventNumber),
    );
    // Without a since, the events before the oldest held are not asked for by number: say so only when they were.
    const asked = since === undefined && shown.length > 0 ? missing.filter(([, high]) => high >= shown[0]!.eventNumber) : missing;
    if (asked.length > 0) {
      outcomes.push(
        `Events ${asked.map(([low, high]) => (low === high ? `${low}` : `${low}-${high}`)).join(', ')} are no longer held: the service keeps settled events for DELIVERY_LOG_RETENTION_DAYS days`,
      );
    }
    if (held.length > maxEventsPerAnswer)
      outcomes.push(
        `More than ${maxEventsPerAnswer} events: these end at ${shown.at(-1)!.eventNumber}; ask again with eventsSinceNumber=${shown.at(-1)!.eventNumber + 1}`,
      );
  }
  const subject = subjectOf(context, row, content);
  const described = await describeEvents(db, (row.topic_compiled as CompiledTopic).shapes, content, shown, () => undefined);
  const bundle = notificationBundle(statusParameters(subject, 'query-event', last, described, row.error ?? undefined), subject, described);
  const query = new URLSearchParams(input).toString();
  const eventsUrl = `${context.baseUrl}/fhir/resources/Subscription/${row.id}/$events${query === '' ? '' : `?${query}`}`;
  const outcomeEntries = outcomes.map((text) => {
    const outcome = information(text);
    return { fullUrl: `urn:uuid:${outcome.id as string}`, resource: outcome, request: { method: 'GET', url: eventsUrl }, response: { status: '200' } };
  });
  return { ...bundle, entry: [...(bundle.entry as unknown[]), ...outcomeEntries] };
}

function eventNumber(name: string, value: string): number {
  if (!/^\d{1,15}$/.test(value)) throw refusal(`${name} must be an event number (a whole number)`);
  return Number(value);
}

/** The numbered events from..to of a subscription still in the log, with their versions, one more than an answer holds. */
async function heldEvents(db: Db, subscriptionId: string, from: number, to: number): Promise<LoggedEvent[]> {
  const { rows } = await sql<{
    event_number: string;
    resource_type: string;
    resource_id: string;
    version_id: number;
    deleted: boolean;
    content: FhirResource | null;
    last_updated: Date;
  }>`
    SELECT e.event_number, e.resource_type, e.resource_id, e.version_id, e.deleted, version.content, coalesce(version.last_updated, e.written_at) AS last_updated
    FROM webhook.subscription_events e
    LEFT JOIN fhir.resource_history version
      ON version.resource_type = e.resource_type AND version.id = e.resource_id AND version.version_id = e.version_id
    WHERE e.subscription_id = ${subscriptionId} AND e.event_number BETWEEN ${from} AND ${to}
    ORDER BY e.event_number
    LIMIT ${maxEventsPerAnswer + 1}`.execute(db);
  return rows.map((row) => ({
    eventNumber: Number(row.event_number),
    resourceType: row.resource_type,
    resourceId: row.resource_id,
    versionId: row.version_id,
    deleted: row.deleted,
    content: row.content ?? undefined,
    lastUpdated: row.last_updated,
  }));
}

/** The runs of numbers from..to that `held` (ascending, within from..to) lacks, as [low, high]: the gaps between what is held. */
function missingRanges(from: number, to: number, held: number[]): [number, number][] {
  const ranges: [number, number][] = [];
  let expected = from;
  for (const number of [...held, to + 1]) {
    if (number > expected) ranges.push([expected, number - 1]);
    expected = number + 1;
  }
  return ranges;
}

function information(text: string): FhirResource {
  return { resourceType: 'OperationOutcome', id: randomUUID(), issue: [{ severity: 'information', code: 'informational', details: { text } }] };
}
