import { randomUUID } from 'node:crypto';
import type { Task, TaskList } from 'graphile-worker';
import { sql } from 'kysely';
import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import type { Config } from '../config/index.ts';
import type { Db } from '../db/database.ts';
import type { FhirResource } from '../db/schema.ts';
import type { AlertMailer } from '../mail/alerts.ts';
import type { CompiledCriteria } from '../search/criteria.ts';
import { isSupported, searchParametersOf } from '../search/parameters.ts';
import type { Include } from '../search/query.ts';
import { includedResources } from '../search/search.ts';
import type { SecretBox } from '../subscriptions/secrets.ts';
import type { TokenProvider } from './oauth.ts';
import { outboundHeaders, postWebhook, type CallResult } from './outbound.ts';

/**
 * The dispatcher's graphile-worker tasks. The database enqueues them (a
 * subscription's creation, the triggers on fhir.resources); they call the
 * subscriber, record every attempt, count failures and move subscriptions
 * between states, each state change in one transaction with the jobs it implies.
 */

export type DispatchContext = {
  db: Db;
  box: SecretBox;
  baseUrl: string;
  namingSystem: string;
  delivery: Config['delivery'];
  /** The SSRF-guarded HTTP/1.1 agent. */
  dispatcher: Dispatcher;
  tokens: TokenProvider | undefined;
  mailer: AlertMailer;
  logger: Logger;
};

/** A change of a resource that a subscription is told about (the triggers' job payload). */
type ResourceEvent = { subscriptionId: string; resourceType: string; resourceId: string; versionId: number; deleted: boolean; attempt?: number };
type HandshakePayload = { subscriptionId: string; attempt?: number };
type AlertPayload = { alertId: string };

/** The longest Retry-After honoured: beyond it the configured delay applies. */
const retryAfterCapSeconds = 600;

export function dispatchTasks(context: DispatchContext): TaskList {
  const task =
    <T>(run: (payload: T) => Promise<void>): Task =>
    async (payload) =>
      run(payload as T);
  return {
    subscription_handshake: task<HandshakePayload>((payload) => handshake(context, payload)),
    subscription_reactivation: task<ResourceEvent>((event) => reactivate(context, event)),
    notification_delivery: task<ResourceEvent>((event) => deliver(context, event)),
    deactivation_alert: task<AlertPayload>((payload) => sendAlert(context, payload)),
    delivery_log_cleanup: task<unknown>(() => cleanUpDeliveryLog(context)),
  };
}

/** The daily cleanup of old attempt records (graphile-worker crontab). */
export const dispatchCrontab = '0 3 * * * delivery_log_cleanup';

// --- subscriptions as the worker sees them ----------------------------------

type Target = {
  id: string;
  status: 'requested' | 'active' | 'error' | 'off';
  criteria: string;
  endpoint: string;
  headers: string[];
  secret: string;
  compiled: CompiledCriteria;
  contactEmails: string[];
};

async function loadTarget(context: DispatchContext, id: string): Promise<Target | undefined> {
  const row = await context.db
    .selectFrom('webhook.subscriptions')
    .select(['id', 'status', 'criteria', 'endpoint', 'headers_encrypted', 'signing_secret_encrypted', 'compiled_criteria', 'contact_emails'])
    .where('id', '=', id)
    .executeTakeFirst();
  if (!row) return undefined;
  return {
    id: row.id,
    status: row.status,
    criteria: row.criteria,
    endpoint: row.endpoint,
    headers: JSON.parse(context.box.open(row.headers_encrypted)) as string[],
    secret: context.box.open(row.signing_secret_encrypted),
    compiled: row.compiled_criteria as CompiledCriteria,
    contactEmails: row.contact_emails,
  };
}

/** Sends a FHIR body to the subscriber, signed, with an OAuth token when configured. */
async function call(context: DispatchContext, target: Target, resource: unknown): Promise<CallResult> {
  const body = Buffer.from(JSON.stringify(resource));
  let token: string | undefined;
  if (context.tokens) {
    try {
      token = await context.tokens.token();
    } catch (error) {
      // TokenEndpointError messages say what failed ("OAuth token endpoint answered HTTP 500: …").
      const reason = error instanceof Error ? error.message : String(error);
      return {
        verdict: 'retryable',
        httpStatus: undefined,
        error: reason,
        responseExcerpt: undefined,
        retryAfterSeconds: undefined,
        startedAt: new Date(),
        durationMs: 0,
        failedAt: 'token-endpoint',
      };
    }
  }
  return postWebhook(target.endpoint, body, outboundHeaders(target.headers, body, target.secret, token), {
    dispatcher: context.dispatcher,
    responseTimeoutMs: context.delivery.responseTimeoutMs,
  });
}

// --- handshake ---------------------------------------------------------------

/** A history Bundle holding a SubscriptionStatus of type handshake (FHIR subscriptions backport). */
function handshakeBundle(context: DispatchContext, target: Target): unknown {
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
          subscription: { reference: `${context.baseUrl}/fhir/resources/Subscription/${target.id}` },
          topic: target.criteria,
        },
      },
    ],
  };
}

async function handshake(context: DispatchContext, { subscriptionId, attempt = 1 }: HandshakePayload): Promise<void> {
  const target = await loadTarget(context, subscriptionId);
  if (target?.status !== 'requested') return;
  const result = await call(context, target, handshakeBundle(context, target));
  await context.db.transaction().execute(async (db) => {
    if (result.verdict === 'delivered') {
      await db
        .updateTable('webhook.subscriptions')
        .set({ status: 'active', failure_count: 0, error: null })
        .where('id', '=', target.id)
        .where('status', '=', 'requested')
        .execute();
      await recordAttempt(db, target.id, 'handshake', undefined, attempt, result, 'delivered');
      return;
    }
    const delay = result.verdict === 'retryable' ? retryDelay(context, attempt, result) : undefined;
    if (delay !== undefined) {
      await enqueue(db, 'subscription_handshake', { subscriptionId, attempt: attempt + 1 }, delay);
      await recordAttempt(db, target.id, 'handshake', undefined, attempt, result, 'retrying');
      return;
    }
    await db
      .updateTable('webhook.subscriptions')
      .set({ status: 'error', error: `Handshake failed: ${describe(result, target.endpoint)}` })
      .where('id', '=', target.id)
      .where('status', '=', 'requested')
      .execute();
    await recordAttempt(db, target.id, 'handshake', undefined, attempt, result, 'failed');
  });
}

/**
 * The next matching event of a subscription in error: the handshake again;
 * on success the subscription is active and this event is delivered, on
 * failure it stays in error with the new reason. Missed events are not replayed.
 */
async function reactivate(context: DispatchContext, event: ResourceEvent): Promise<void> {
  const target = await loadTarget(context, event.subscriptionId);
  // Reactivated meanwhile (by an earlier event's job): this event is delivered like any other.
  if (target?.status === 'active') return enqueue(context.db, 'notification_delivery', { ...event, attempt: 1 });
  if (target?.status !== 'error') return;
  const result = await call(context, target, handshakeBundle(context, target));
  await context.db.transaction().execute(async (db) => {
    if (result.verdict === 'delivered') {
      const reactivated = await db
        .updateTable('webhook.subscriptions')
        .set({ status: 'active', failure_count: 0, error: null })
        .where('id', '=', target.id)
        .where('status', '=', 'error')
        // A newer live subscription for the same criteria has taken its place: one live per criteria.
        .where(sql<boolean>`NOT EXISTS (SELECT 1 FROM webhook.subscriptions live
          WHERE live.criteria = ${target.criteria} AND live.status IN ('requested', 'active'))`)
        .executeTakeFirst();
      if (reactivated.numUpdatedRows > 0n) await enqueue(db, 'notification_delivery', { ...event, attempt: 1 });
    } else {
      await db
        .updateTable('webhook.subscriptions')
        .set({ error: `Reactivation handshake failed: ${describe(result, target.endpoint)}` })
        .where('id', '=', target.id)
        .where('status', '=', 'error')
        .execute();
    }
    await recordAttempt(db, target.id, 'handshake', event, 1, result, result.verdict === 'delivered' ? 'delivered' : 'failed');
  });
}

// --- notifications -----------------------------------------------------------

async function deliver(context: DispatchContext, event: ResourceEvent): Promise<void> {
  const attempt = event.attempt ?? 1;
  const target = await loadTarget(context, event.subscriptionId);
  // Only active subscriptions deliver; a retry of a subscription gone to error or off stops here.
  if (target?.status !== 'active') return;
  const body = await notificationBody(context, target, event);
  if (body === undefined) {
    context.logger.warn({ event }, 'the resource version of a notification is gone; nothing to deliver');
    return;
  }
  const result = await call(context, target, body);
  if (result.verdict === 'delivered') {
    // The common path in one statement, one commit: the reset of the failure count and the record.
    await context.db
      .with('reset', (db) => db.updateTable('webhook.subscriptions').set({ failure_count: 0 }).where('id', '=', target.id).where('failure_count', '>', 0))
      .insertInto('webhook.delivery_attempts')
      .values(attemptRecord(target.id, 'notification', event, attempt, result, 'delivered'))
      .execute();
    return;
  }
  await context.db.transaction().execute(async (db) => {
    const counted = await db
      .updateTable('webhook.subscriptions')
      .set((eb) => ({ failure_count: eb('failure_count', '+', 1) }))
      .where('id', '=', target.id)
      .where('status', '=', 'active')
      .returning('failure_count')
      .executeTakeFirst();
    if (counted && counted.failure_count >= context.delivery.maxFailures) {
      await deactivate(context, db, target, event, result);
      await recordAttempt(db, target.id, 'notification', event, attempt, result, 'failed');
      return;
    }
    const delay = counted && result.verdict === 'retryable' ? retryDelay(context, attempt, result) : undefined;
    if (delay !== undefined) await enqueue(db, 'notification_delivery', { ...event, attempt: attempt + 1 }, delay);
    await recordAttempt(db, target.id, 'notification', event, attempt, result, delay === undefined ? 'failed' : 'retrying');
  });
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
    return { ...resource, meta: { ...meta, tag: [...(meta.tag ?? []), { system: tagSystem(context), code: 'DELETE' }] } };
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

/** Active → error: the reason stored, an alert recorded and enqueued, in the transaction that counted the failure. */
async function deactivate(context: DispatchContext, db: Db, target: Target, event: ResourceEvent, result: CallResult): Promise<void> {
  const resourceUrl = `${context.baseUrl}/fhir/resources/${event.resourceType}/${event.resourceId}`;
  const reason = `${describe(result, target.endpoint)}; ${event.resourceType}/${event.resourceId} (version ${event.versionId}) was not delivered`;
  await db.updateTable('webhook.subscriptions').set({ status: 'error', error: reason }).where('id', '=', target.id).execute();
  const alert = await db
    .insertInto('webhook.deactivation_alerts')
    .values({ subscription_id: target.id, recipients: target.contactEmails, reason, handled_as: null, handled_at: null })
    .returning('id')
    .executeTakeFirstOrThrow();
  await enqueue(db, 'deactivation_alert', { alertId: alert.id });
  context.logger.warn({ subscriptionId: target.id, reason, resourceUrl }, 'subscription deactivated after repeated delivery failures');
}

// --- alerts and housekeeping ---------------------------------------------------

async function sendAlert(context: DispatchContext, { alertId }: AlertPayload): Promise<void> {
  const alert = await context.db
    .selectFrom('webhook.deactivation_alerts as alert')
    .innerJoin('webhook.subscriptions as subscription', 'subscription.id', 'alert.subscription_id')
    .select(['alert.id', 'alert.recipients', 'alert.reason', 'alert.created_at', 'alert.handled_as', 'subscription.id as subscriptionId', 'subscription.criteria', 'subscription.endpoint'])
    .where('alert.id', '=', alertId)
    .executeTakeFirst();
  if (!alert || alert.handled_as !== null) return;
  const lastFailure = await context.db
    .selectFrom('webhook.delivery_attempts')
    .select(['http_status', 'error', 'resource_type', 'resource_id'])
    .where('subscription_id', '=', alert.subscriptionId)
    .where('outcome', '!=', 'delivered')
    .orderBy('id', 'desc')
    .limit(1)
    .executeTakeFirst();
  // The transport throws on SMTP failure: graphile-worker then retries this job.
  const handledAs = await context.mailer.send({
    subscriptionId: alert.subscriptionId,
    criteria: alert.criteria,
    endpoint: alert.endpoint,
    recipients: alert.recipients,
    httpStatus: lastFailure?.http_status ?? undefined,
    errorMessage: alert.reason,
    undeliveredResourceUrl:
      lastFailure?.resource_type && lastFailure.resource_id ? `${context.baseUrl}/fhir/resources/${lastFailure.resource_type}/${lastFailure.resource_id}` : undefined,
    deactivatedAt: alert.created_at.toISOString(),
  });
  await context.db.updateTable('webhook.deactivation_alerts').set({ handled_as: handledAs, handled_at: new Date() }).where('id', '=', alert.id).execute();
}

async function cleanUpDeliveryLog(context: DispatchContext): Promise<void> {
  await sql`DELETE FROM webhook.delivery_attempts WHERE started_at < now() - make_interval(days => ${context.delivery.logRetentionDays})`.execute(context.db);
}

// --- helpers -------------------------------------------------------------------

/** The delay before retry number `attempt` (1-based), or undefined when retries are used up; Retry-After wins within its cap. */
function retryDelay(context: DispatchContext, attempt: number, result: CallResult): number | undefined {
  const configured = context.delivery.retryDelaysMs[attempt - 1];
  if (configured === undefined) return undefined;
  const retryAfter = result.retryAfterSeconds;
  return retryAfter === undefined ? configured : Math.max(configured, Math.min(retryAfter, retryAfterCapSeconds) * 1000);
}

async function enqueue(db: Db, task: string, payload: object, delayMs?: number): Promise<void> {
  const runAt = delayMs === undefined ? null : new Date(Date.now() + delayMs);
  await sql`SELECT graphile_worker.add_job(${task}, ${JSON.stringify(payload)}::json, run_at => ${runAt}::timestamptz)`.execute(db);
}

async function recordAttempt(db: Db, ...record: Parameters<typeof attemptRecord>): Promise<void> {
  await db.insertInto('webhook.delivery_attempts').values(attemptRecord(...record)).execute();
}

function attemptRecord(
  subscriptionId: string,
  kind: 'handshake' | 'notification',
  event: ResourceEvent | undefined,
  attempt: number,
  result: CallResult,
  outcome: 'delivered' | 'retrying' | 'failed',
) {
  return {
    subscription_id: subscriptionId,
    kind,
    resource_type: event?.resourceType ?? null,
    resource_id: event?.resourceId ?? null,
    version_id: event?.versionId ?? null,
    attempt,
    started_at: result.startedAt,
    duration_ms: result.durationMs,
    http_status: result.httpStatus ?? null,
    outcome,
    error: result.error ?? null,
    response_excerpt: result.responseExcerpt ?? null,
  };
}

function describe(result: CallResult, endpoint: string): string {
  return result.failedAt === 'token-endpoint' ? (result.error ?? 'OAuth token endpoint failed') : `${result.error ?? 'failed'} from ${endpoint}`;
}

function tagSystem(context: DispatchContext): string {
  return `${context.baseUrl}/fhir/resources/NamingSystem/${context.namingSystem}`;
}
