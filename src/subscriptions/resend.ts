import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import { requeueEvents, type RequeuedEventRow } from '../db/sql/resend-events.ts';
import { FhirError, notFound, refusal } from '../fhir/outcome.ts';
import { visibleTo, type Caller } from '../auth/api-keys.ts';
import { isUuid } from '../db/schema.ts';

/**
 * Resending recorded events, when someone asks: the subscription's own API
 * client or an operator. One event (by its number, or by a call made for it),
 * or every event that failed for good since an instant. A resend is a new
 * attempt of the same event (db/functions/webhook.resend_events.sql): same
 * event number, same version, same webhook-id; recorded and counted like any
 * call. Only to an active subscription.
 */

export type ResendSelection = { eventNumber: number } | { attemptId: string } | { failedSince: Date };

/** An event as a resend names it: its number (none for a classic event never claimed) and `Type/id/_history/version`. */
export type ResentEvent = { eventNumber: number | null; resource: string };
export type ResendOutcome = { queued: ResentEvent[]; skipped: (ResentEvent & { reason: string })[] };

/** What $resend answers and `deliveries resend` prints when failedSince matches nothing (the only selection that can). */
export const nothingToResend = 'Nothing to resend: no event failed for good since then';

/** Events failed since an instant, at most this many in one request: the rest with the next. */
export const maxResentAtOnce = 10_000;

type Candidate = {
  id: string;
  event_number: string | null;
  resource_type: string;
  resource_id: string;
  version_id: number;
  status: string;
  newer_sent: number | null;
};

/**
 * Queues the events `selection` names again. `caller` is the API client (it
 * sees its own subscriptions, or all with the admin scope); none for an
 * operator. One event that cannot be sent again is refused (400) with why;
 * of the events failed since an instant, those that cannot are skipped and
 * listed with why.
 */
export async function resendEvents(db: Db, subscriptionId: string, selection: ResendSelection, caller?: Caller): Promise<ResendOutcome> {
  const subscriptions = db.selectFrom('webhook.subscriptions as s');
  const subscription = isUuid(subscriptionId)
    ? await visibleTo(subscriptions, caller)
        .select(['s.id', 's.status', 's.topic_id'])
        .select(sql<string>`webhook.last_event_number(s.id)`.as('last_event_number'))
        .where('s.id', '=', subscriptionId)
        .executeTakeFirst()
    : undefined;
  if (subscription === undefined) throw notFound(`Subscription/${subscriptionId} is not known`);
  if (subscription.status !== 'active') {
    throw refusal(
      `Subscription/${subscriptionId} is ${subscription.status}: only an active subscription is sent to (one in error is reactivated by its next event, or at once by $reactivate; resend then)`,
    );
  }
  const candidates = await candidatesOf(db, subscription, selection);
  const onTopic = subscription.topic_id !== null;
  const queueable: Candidate[] = [];
  const skipped: ResendOutcome['skipped'] = [];
  for (const candidate of candidates) {
    const reason = whyNot(candidate, onTopic);
    if (reason === undefined) queueable.push(candidate);
    else skipped.push({ ...named(candidate), reason });
  }
  if (!('failedSince' in selection) && skipped.length > 0) throw refusal(`${describe(skipped[0]!)} cannot be sent again: ${skipped[0]!.reason}`);
  const queued = await requeueEvents(
    db,
    subscription.id,
    queueable.map((candidate) => candidate.id),
  );
  return { queued: queued.map(named), skipped };
}

async function candidatesOf(db: Db, subscription: { id: string; last_event_number: string }, selection: ResendSelection): Promise<Candidate[]> {
  // A classic subscription's event is superseded when claimed if a newer version of its resource was sent since.
  const events = db
    .selectFrom('webhook.subscription_events as e')
    .select(['e.id', 'e.event_number', 'e.resource_type', 'e.resource_id', 'e.version_id', 'e.status'])
    .select((eb) =>
      eb
        .selectFrom('webhook.delivery_attempts as called')
        .select((inner) => inner.fn.max('called.version_id').as('newer'))
        .whereRef('called.subscription_id', '=', 'e.subscription_id')
        .where('called.kind', '=', 'notification')
        .whereRef('called.resource_type', '=', 'e.resource_type')
        .whereRef('called.resource_id', '=', 'e.resource_id')
        .whereRef('called.version_id', '>', 'e.version_id')
        .as('newer_sent'),
    )
    .where('e.subscription_id', '=', subscription.id);
  if ('eventNumber' in selection) {
    const found = await events.where('e.event_number', '=', String(selection.eventNumber)).execute();
    if (found.length > 0) return found;
    const last = Number(subscription.last_event_number);
    throw new FhirError(
      404,
      'not-found',
      selection.eventNumber > last
        ? `Subscription/${subscription.id} has had ${last} events; there is no event ${selection.eventNumber}`
        : `Event ${selection.eventNumber} of Subscription/${subscription.id} is no longer held (settled events are kept DELIVERY_LOG_RETENTION_DAYS days)`,
    );
  }
  if ('attemptId' in selection) {
    const attempt = /^\d{1,18}$/.test(selection.attemptId)
      ? await db
          .selectFrom('webhook.delivery_attempts')
          .select(['resource_type', 'resource_id', 'version_id'])
          .where('id', '=', selection.attemptId)
          .where('subscription_id', '=', subscription.id)
          .where('kind', '=', 'notification')
          .executeTakeFirst()
      : undefined;
    if (attempt === undefined) throw new FhirError(404, 'not-found', `Subscription/${subscription.id} has no notification call with id ${selection.attemptId}`);
    const found = await events
      .where('e.resource_type', '=', attempt.resource_type!)
      .where('e.resource_id', '=', attempt.resource_id!)
      .where('e.version_id', '=', attempt.version_id!)
      .orderBy('e.id', 'desc')
      .limit(1)
      .execute();
    if (found.length > 0) return found;
    throw new FhirError(
      404,
      'not-found',
      `The event of call ${selection.attemptId} (${attempt.resource_type}/${attempt.resource_id}/_history/${attempt.version_id}) is no longer held (settled events are kept DELIVERY_LOG_RETENTION_DAYS days)`,
    );
  }
  return events.where('e.status', '=', 'failed').where('e.settled_at', '>=', selection.failedSince).orderBy('e.id').limit(maxResentAtOnce).execute();
}

/** Why an event cannot be sent again, or undefined when it can. */
function whyNot(candidate: Candidate, onTopic: boolean): string | undefined {
  switch (candidate.status) {
    case 'pending':
      return 'it is pending already (being sent, or waiting for its retry)';
    case 'gone':
      return 'its version is no longer in the resource history';
    case 'superseded':
      return 'a newer version of the resource was sent instead';
  }
  if (!onTopic && candidate.newer_sent !== null) {
    return `version ${candidate.newer_sent} of the resource was sent since, and a subscriber never gets a version after a newer one: resend that one`;
  }
  return undefined;
}

function named(event: RequeuedEventRow): ResentEvent {
  return {
    eventNumber: event.event_number === null ? null : Number(event.event_number),
    resource: `${event.resource_type}/${event.resource_id}/_history/${event.version_id}`,
  };
}

function describe(event: ResentEvent): string {
  return event.eventNumber === null ? `The event of ${event.resource}` : `Event ${event.eventNumber} (${event.resource})`;
}
