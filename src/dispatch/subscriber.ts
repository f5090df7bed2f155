import { randomUUID } from 'node:crypto';
import type { WorkerUtils } from 'graphile-worker';
import type { Logger } from 'pino';
import type { Config } from '../config/index.ts';
import type { Db } from '../db/database.ts';
import type { ChannelType, DeliveryKind, PayloadContent } from '../db/schema.ts';
import type { AlertMailer } from '../mail/alerts.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { CompiledCriteria } from '../search/criteria.ts';
import { shownEndpoint, type CallResult, type Notification } from '../channels/channel.ts';
import { channelOf, openSendParts, type SendParts } from '../channels/registry.ts';
import { wholeEndpoint } from '../subscriptions/endpoints.ts';
import type { SecretBox } from '../subscriptions/secrets.ts';
import { retryPolicyOf, type RetryPolicy } from '../subscriptions/retry-policy.ts';
import type { CompiledTopic, TopicShape } from '../topics/compile.ts';
import { notificationBundle, statusParameters, type StatusSubject } from '../topics/notification.ts';
import type { VersionEvent } from '../db/jobs.ts';
import type { RetrySchedule } from './events/retry-delay.ts';

/**
 * What every dispatcher task shares: the subscriber as a task sees it
 * (Target, loadTarget), the context its calls are made with
 * (createCallContext), a call through the subscription's channel (call), the
 * handshake's body and the attempt record.
 */

export type DispatchContext = SendParts & {
  db: Db;
  /** graphile-worker's utilities on the workers' pool (its queue cleanup). */
  workerUtils: WorkerUtils;
  box: SecretBox;
  baseUrl: string;
  namingSystem: string;
  delivery: Config['delivery'];
  mailer: AlertMailer;
  /** ALERT_EMAIL_INTERVAL_SECONDS: at most one alert e-mail per subscription in this many seconds. */
  alertIntervalSeconds: number;
  metrics: Metrics;
  logger: Logger;
};

/**
 * What calling a subscriber needs, without the workers' job queue and mailer:
 * a worker's context, or the one an API or CLI process makes for an
 * operator's reactivation (src/dispatch/reactivation-on-request.ts).
 */
export type CallContext = Omit<DispatchContext, 'workerUtils' | 'mailer' | 'alertIntervalSeconds' | 'logger'> & { logger: Pick<Logger, 'info' | 'warn'> };

export type CallSettings = {
  db: Db;
  box: SecretBox;
  baseUrl: string;
  namingSystem: string;
  delivery: Config['delivery'];
  oauth: Config['oauth'];
  metrics: Metrics;
  logger: CallContext['logger'];
};

/**
 * What a process calls subscribers with: the settings, and each channel's
 * own parts (rest-hook's SSRF-guarded agent, places per origin and OAuth
 * client; the brokers' connections: openSendParts in
 * src/channels/registry.ts). The workers make theirs with it
 * (src/dispatch/worker.ts), and so do the processes that call a subscriber on
 * an operator's request (the API's and the CLI's $reactivate). close() ends
 * their connections.
 */
export function createCallContext({ oauth, ...settings }: CallSettings): { context: CallContext; close(): Promise<void> } {
  const { parts, close } = openSendParts(settings.delivery, oauth);
  return { context: { ...settings, ...parts }, close };
}

/** A subscription as a task sees it: its secrets decrypted. */
export type Target = {
  id: string;
  /** How its notifications leave (src/channels/registry.ts). */
  channel: ChannelType;
  status: 'requested' | 'active' | 'error' | 'off';
  criteria: string;
  endpoint: string;
  headers: string[];
  secret: string;
  /**
   * The secret before the last rotation and the end of its overlap, until
   * which calls are signed with it too (checked when a call is signed: a
   * target is reused for a while); undefined: none, or its overlap was over.
   */
  previousSecret: { secret: string; until: Date } | undefined;
  /** A classic subscription's criteria (an empty object for one on a topic). */
  compiled: CompiledCriteria;
  contactEmails: string[];
  /** What a topic-based subscription's notifications are made of; undefined for a classic one. */
  topic: TopicTarget | undefined;
  /** Calls a second at most: the subscription's own limit, else DELIVERY_MAX_CALLS_PER_SECOND; undefined: none. */
  maxCallsPerSecond: number | undefined;
  /**
   * Calls in flight at once at most: the subscription's own (parallel-calls)
   * within DELIVERY_PARALLEL_CALLS, which bounds every subscription's; else
   * one for a topic-based subscription, whose receiver reads the events in
   * number order, and DELIVERY_PARALLEL_CALLS for a classic one.
   */
  parallelCalls: number;
  /** Its attempts and the delays between them: its own retry policy, else DELIVERY_MAX_FAILURES and DELIVERY_RETRY_DELAYS_MS. */
  retry: RetrySchedule;
};

export type TopicTarget = {
  /** The topic's canonical URL. */
  url: string;
  payloadContent: PayloadContent;
  /** The includes a full-resource notification adds for each focus type. */
  shapes: TopicShape[];
  /** backport-timeout, when it asks for less than DELIVERY_RESPONSE_TIMEOUT_MS. */
  timeoutMs: number | undefined;
  /** backport-max-count: at most this many events in one notification (1 when the subscription does not say). */
  maxCount: number;
};

export async function loadTarget(context: CallContext, id: string): Promise<Target | undefined> {
  const row = await context.db
    .selectFrom('webhook.subscriptions as s')
    .leftJoin('webhook.subscription_topics as topic', 'topic.id', 's.topic_id')
    .select([
      's.id',
      's.status',
      's.criteria',
      's.endpoint',
      's.endpoint_encrypted',
      's.headers_encrypted',
      's.signing_secret_encrypted',
      's.compiled_criteria',
      's.contact_emails',
    ])
    .select([
      's.payload_content',
      's.timeout_seconds',
      's.max_count',
      's.max_calls_per_second',
      's.parallel_calls',
      's.channel_type',
      's.max_attempts',
      's.retry_first_delay_ms',
      's.retry_delay_growth',
      's.retry_max_delay_ms',
      'topic.url as topic_url',
      'topic.compiled as topic_compiled',
    ])
    .select(['s.previous_signing_secret_encrypted', 's.previous_secret_until'])
    .where('s.id', '=', id)
    .executeTakeFirst();
  if (!row) return undefined;
  const topic =
    row.payload_content === null || row.topic_url === null
      ? undefined
      : {
          url: row.topic_url,
          payloadContent: row.payload_content,
          shapes: (row.topic_compiled as CompiledTopic).shapes,
          timeoutMs: row.timeout_seconds === null ? undefined : row.timeout_seconds * 1000,
          maxCount: row.max_count ?? 1,
        };
  return {
    id: row.id,
    channel: row.channel_type,
    status: row.status,
    criteria: row.criteria,
    endpoint: wholeEndpoint(row, context.box),
    headers: JSON.parse(context.box.open(row.headers_encrypted)) as string[],
    secret: context.box.open(row.signing_secret_encrypted),
    previousSecret:
      row.previous_signing_secret_encrypted === null || row.previous_secret_until === null || row.previous_secret_until.getTime() <= Date.now()
        ? undefined
        : { secret: context.box.open(row.previous_signing_secret_encrypted), until: row.previous_secret_until },
    compiled: row.compiled_criteria as CompiledCriteria,
    contactEmails: row.contact_emails,
    // A channel that is not paced (a write to the database) has no calls to pace.
    maxCallsPerSecond: !channelOf(row.channel_type).paced
      ? undefined
      : row.max_calls_per_second === null
        ? context.delivery.maxCallsPerSecond
        : Number(row.max_calls_per_second),
    parallelCalls:
      row.parallel_calls === null ? (topic === undefined ? context.delivery.parallelCalls : 1) : Math.min(row.parallel_calls, context.delivery.parallelCalls),
    topic,
    retry: retryScheduleOf(retryPolicyOf(row), context.delivery),
  };
}

/** A subscription's retries: its own policy where it says one, else the service's settings. */
function retryScheduleOf(policy: RetryPolicy, delivery: Config['delivery']): RetrySchedule {
  return { maxFailures: policy.maxAttempts ?? delivery.maxFailures, retryDelaysMs: delivery.retryDelaysMs, backoff: policy.backoff };
}

/**
 * Sends a notification to the subscriber through its subscription's channel
 * (src/channels/registry.ts): rest-hook's signed POST to its endpoint, or
 * websocket's hand-over to the API processes holding its clients. Its
 * `message` says what it is ("handshake", "Patient/1/_history/2"): the same
 * for every retry. `signal` is the job's: a graceful shutdown that outlasts
 * graphile-worker's patience (5 s) aborts the send, and ShutdownAbort is thrown.
 */
export async function call(context: CallContext, target: Target, notification: Notification, signal?: AbortSignal): Promise<CallResult> {
  return channelOf(target.channel).send(context, target, notification, signal);
}

/**
 * The handshake: for a topic-based subscription the Backport IG's (a history
 * Bundle with the status Parameters, type handshake, and the events it has
 * had: 0 on creation, more before a reactivation); for a classic one the
 * spec's (a history Bundle holding an R5-style SubscriptionStatus). A history
 * entry has the request and the response that made it (R4's bdl-3, bdl-4):
 * the status is what GET {subscription}/$status would answer, as the IG's.
 */
export function handshakeBundle(context: CallContext, target: Target, eventsSinceSubscriptionStart = 0): unknown {
  if (target.topic !== undefined) {
    const subject = statusSubject(context, target, target.topic);
    return notificationBundle(statusParameters(subject, 'handshake', eventsSinceSubscriptionStart, []), subject, []);
  }
  const subscription = `${context.baseUrl}/fhir/resources/Subscription/${target.id}`;
  return {
    resourceType: 'Bundle',
    id: randomUUID(),
    type: 'history',
    timestamp: new Date().toISOString(),
    entry: [
      {
        fullUrl: `urn:uuid:${randomUUID()}`,
        resource: {
          resourceType: 'SubscriptionStatus',
          status: target.status,
          type: 'handshake',
          eventsSinceSubscriptionStart: '0',
          subscription: { reference: subscription },
          topic: target.criteria,
        },
        request: { method: 'GET', url: `${subscription}/$status` },
        response: { status: '200' },
      },
    ],
  };
}

/** A topic-based subscription as its statuses name it. */
export function statusSubject(context: Pick<DispatchContext, 'baseUrl'>, target: Pick<Target, 'id' | 'status'>, topic: TopicTarget): StatusSubject {
  return {
    serviceBase: `${context.baseUrl}/fhir/resources`,
    subscriptionId: target.id,
    topicUrl: topic.url,
    payloadContent: topic.payloadContent,
    status: target.status,
  };
}

export type AttemptKind = DeliveryKind;
export type AttemptOutcome = 'delivered' | 'retrying' | 'failed';

/** Records one call, in `db` (the task's transaction); returns the record, to count once committed. */
export async function recordAttempt(db: Db, ...record: Parameters<typeof attemptRecord>): Promise<AttemptRecord> {
  const row = attemptRecord(...record);
  await db.insertInto('webhook.delivery_attempts').values(row).execute();
  return row;
}

/** The calls a task recorded, counted by kind and outcome with their durations: once their transaction has committed. */
export function countCalls(context: CallContext, records: AttemptRecord[]): void {
  for (const record of records) context.metrics.called(record.kind, record.outcome, record.duration_ms);
}

/** A row of webhook.delivery_attempts. */
export type AttemptRecord = ReturnType<typeof attemptRecord>;

export function attemptRecord(
  subscriptionId: string,
  kind: AttemptKind,
  event: (VersionEvent & { eventNumber?: number }) | undefined,
  attempt: number,
  result: CallResult,
  outcome: AttemptOutcome,
) {
  return {
    subscription_id: subscriptionId,
    kind,
    resource_type: event?.resourceType ?? null,
    resource_id: event?.resourceId ?? null,
    version_id: event?.versionId ?? null,
    event_number: event?.eventNumber ?? null,
    attempt,
    started_at: result.startedAt,
    duration_ms: result.durationMs,
    http_status: result.httpStatus ?? null,
    outcome,
    error: result.error ?? null,
    response_excerpt: result.responseExcerpt ?? null,
  };
}

/** Why a call failed, for the subscription's error: the status or network error and the endpoint, or the token endpoint's failure. */
export function describeFailure(result: CallResult, endpoint: string): string {
  return result.failedAt === 'token-endpoint' ? (result.error ?? 'OAuth token endpoint failed') : `${result.error ?? 'failed'} from ${shownEndpoint(endpoint)}`;
}
