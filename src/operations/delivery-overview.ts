import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import type { DeliveryKind, SubscriptionStatus } from '../db/schema.ts';
import type { PayloadContent } from '../db/schema.ts';
import { visibleTo, type Caller } from '../auth/api-keys.ts';

/**
 * What the people who run the service look at: the subscriptions with their
 * state, a subscription's recent calls and queued work, and the calls as they
 * happen. Read from the tables and the DBA views (db/migrations/0016), never
 * a secret: endpoints are stored with their credentials masked (0015).
 */

export type SubscriptionSummary = {
  id: string;
  status: SubscriptionStatus;
  criteria: string;
  endpoint: string;
  /** Consecutive events refused for good (DELIVERY_MAX_FAILURES of them deactivate): what failure_count counts. */
  failureCount: number;
  /** Calls that failed since the last one delivered (retries included): what led to an `error`. */
  failedCallsSinceSuccess: number;
  /** The last call delivered, or null when none was. */
  lastSuccessAt: Date | null;
  error: string | null;
  /** Times it went to error in the last 24 hours: more than one is a flapping subscriber (its handshake passes, its notifications fail). */
  deactivationsLastDay: number;
  /** Deactivations since it last delivered a notification (migration 0025; failed reactivation handshakes do not count since 0033). */
  deactivationsInARow: number;
  /** In error and held back by the flapping backoff (webhook.reactivation_backoff): events before this instant do not reactivate it. Null otherwise: the next event may. */
  reactivationHeldUntil: Date | null;
  createdAt: Date;
  /** A topic-based subscription's filters, payload level and latest event number; null for a classic one. */
  topic: TopicSummary | null;
};

export type TopicSummary = { filters: string[]; payloadContent: PayloadContent; lastEventNumber: number };

/** What a subscription is on, in one line: its criteria, or its topic with its filters and payload level. */
export function subscribedTo({ criteria, topic }: Pick<SubscriptionSummary, 'criteria' | 'topic'>): string {
  if (topic === null) return criteria;
  return `${criteria}${topic.filters.length === 0 ? '' : ` [${topic.filters.join(' & ')}]`} (${topic.payloadContent})`;
}

/** The subscriptions an API caller may see (the store's rule), or all of them for an operator (no caller: the CLI). */
function subscriptions(db: Db, caller: Caller | undefined) {
  const query = db
    .selectFrom('webhook.subscriptions')
    // The last call delivered, read once: shown, and where the failed calls are counted from (on the attempts-by-subscription index).
    .leftJoinLateral(
      (eb) =>
        eb
          .selectFrom('webhook.delivery_attempts as delivered')
          .select((inner) => inner.fn.max('delivered.started_at').as('at'))
          .whereRef('delivered.subscription_id', '=', 'webhook.subscriptions.id')
          .where('delivered.outcome', '=', 'delivered')
          .as('last_success'),
      (join) => join.onTrue(),
    )
    .select(['id', 'status', 'criteria', 'endpoint', 'failure_count as failureCount', 'error', 'created_at as createdAt', 'last_success.at as lastSuccessAt'])
    .select('deactivations_in_a_row as deactivationsInARow')
    .select(sql<Date | null>`CASE WHEN status = 'error' AND reactivation_not_before > now() THEN reactivation_not_before END`.as('reactivationHeldUntil'))
    .select(
      sql<number>`(SELECT count(*)::int FROM webhook.deactivation_alerts deactivation
                   WHERE deactivation.subscription_id = webhook.subscriptions.id AND deactivation.created_at > now() - interval '24 hours')`.as(
        'deactivationsLastDay',
      ),
    )
    .select(
      sql<number>`(SELECT count(*)::int FROM webhook.delivery_attempts failed
                   WHERE failed.subscription_id = webhook.subscriptions.id AND failed.outcome <> 'delivered'
                     AND failed.started_at > coalesce(last_success.at, '-infinity'))`.as('failedCallsSinceSuccess'),
    )
    .select(
      sql<TopicSummary | null>`CASE WHEN payload_content IS NULL THEN NULL ELSE
        json_build_object('filters', coalesce(filter_criteria, '{}'), 'payloadContent', payload_content, 'lastEventNumber', webhook.last_event_number(webhook.subscriptions.id)) END`.as(
        'topic',
      ),
    );
  return visibleTo(query, caller);
}

export async function listSubscriptions(db: Db, { status, caller }: { status?: SubscriptionStatus[]; caller?: Caller } = {}): Promise<SubscriptionSummary[]> {
  let query = subscriptions(db, caller).orderBy('created_at').orderBy('id');
  if (status !== undefined && status.length > 0) query = query.where('status', 'in', status);
  return query.execute();
}

export async function findSubscription(db: Db, id: string, caller?: Caller): Promise<SubscriptionSummary | undefined> {
  return subscriptions(db, caller).where('id', '=', id).executeTakeFirst();
}

/** One call to a subscriber, as webhook.delivery_attempts records it. */
export type Attempt = {
  id: string;
  subscriptionId: string;
  startedAt: Date;
  kind: DeliveryKind;
  /** For a notification, the subscription's number of the event it sent (what `deliveries resend --event` takes); else null. */
  eventNumber: number | null;
  /** `Type/id/_history/version`, or null for a first handshake. */
  resource: string | null;
  attempt: number;
  outcome: 'delivered' | 'retrying' | 'failed';
  httpStatus: number | null;
  durationMs: number;
  error: string | null;
  /** The start of the subscriber's own answer (our secrets redacted): what tells an operator why. */
  responseExcerpt: string | null;
};

function attempts(db: Db) {
  return db.selectFrom('webhook.delivery_attempts').select([
    'id',
    'subscription_id as subscriptionId',
    'started_at as startedAt',
    'kind',
    // bigint: pg reads it as a string.
    sql<string | null>`event_number`.as('event_number'),
    sql<string | null>`resource_type || '/' || resource_id || '/_history/' || version_id`.as('resource'),
    'attempt',
    'outcome',
    'http_status as httpStatus',
    'duration_ms as durationMs',
    'error',
    'response_excerpt as responseExcerpt',
  ]);
}

/** A bigint event number as a number: a subscription's events are far fewer than 2^53. */
function attemptOf({ event_number, ...call }: Omit<Attempt, 'eventNumber'> & { event_number: string | null }): Attempt {
  return { ...call, eventNumber: event_number === null ? null : Number(event_number) };
}

/** A subscription's latest calls, newest first. */
export async function recentAttempts(db: Db, subscriptionId: string, limit = 20): Promise<Attempt[]> {
  const rows = await attempts(db).where('subscription_id', '=', subscriptionId).orderBy('started_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
  return rows.map(attemptOf);
}

/**
 * The calls started since `since`, oldest first (`deliveries tail`); of one
 * subscription if given. By start time, not by id: 20 worker connections
 * record calls in transactions that commit in any order, so a higher id can
 * be visible before a lower one.
 */
export async function attemptsSince(db: Db, since: Date, subscriptionId?: string): Promise<Attempt[]> {
  let query = attempts(db).where('started_at', '>=', since).orderBy('started_at').orderBy('id').limit(10_000);
  if (subscriptionId !== undefined) query = query.where('subscription_id', '=', subscriptionId);
  return (await query.execute()).map(attemptOf);
}

/**
 * What is queued for a subscription (webhook.pending_work): its pending
 * notification events (task `notification`) and its graphile-worker jobs by
 * task; `items` events or jobs, `running` those being sent or run now.
 */
export type QueuedWork = {
  task: string;
  items: number;
  waiting: number;
  scheduled: number;
  running: number;
  waitingSince: Date | null;
  nextRunAt: Date | null;
};

export async function queuedWork(db: Db, subscriptionId: string): Promise<QueuedWork[]> {
  const { rows } = await sql<QueuedWork>`
    SELECT work AS task, items::int, waiting::int, scheduled::int, sending::int AS running,
           waiting_since AS "waitingSince", next_run_at AS "nextRunAt"
    FROM webhook.pending_work
    WHERE subscription_id = ${subscriptionId}
    ORDER BY work`.execute(db);
  return rows;
}
