import type { Task } from 'graphile-worker';
import { sql } from 'kysely';
import { z } from 'zod';
import type { Db } from './database.ts';

/**
 * The job queue's contract: every graphile-worker job of the service, its task
 * name and its payload. Whoever enqueues a job goes through enqueueJob (the
 * subscription store, the dispatcher's tasks); every task checks its payload
 * with taskFor when the job starts. The notification triggers build the
 * resource-event payload in SQL (webhook.event_payload, in
 * db/migrations/0003_notification_triggers.sql):
 * test/notification-triggers.test.ts pins what they enqueue to these schemas.
 */

const attempt = z.number().int().positive();

/** A change of a resource that a subscription is told about. */
export const resourceEvent = z.object({
  subscriptionId: z.uuid(),
  resourceType: z.string().min(1),
  resourceId: z.string().min(1),
  /** The version that made the event: for a deletion, the deletion's own version. */
  versionId: z.number().int().positive(),
  deleted: z.boolean(),
  /** 1 when absent (as the triggers enqueue it); the retries count up. */
  attempt: attempt.optional(),
});
export type ResourceEvent = z.infer<typeof resourceEvent>;

/** One event of a notification batch (webhook.batch_event in SQL). */
export const batchEvent = resourceEvent.omit({ subscriptionId: true });
export type BatchEvent = z.infer<typeof batchEvent>;

/** What an event is, as one string ("Patient/7/_history/3"): a version, a deletion being a version of its own. */
export function eventKey({ resourceType, resourceId, versionId }: BatchEvent): string {
  return `${resourceType}/${resourceId}/_history/${versionId}`;
}

/** At most this many events in one notification_delivery job (the triggers' batch_size). */
export const maxBatchSize = 100;

/**
 * Events for one subscription, sent in their order: a statement's matching
 * rows in chunks, or a batch's events to try again.
 */
const notificationBatch = z.object({ subscriptionId: z.uuid(), events: z.array(batchEvent).min(1).max(maxBatchSize) });
export type NotificationBatch = z.infer<typeof notificationBatch>;

/** The named queue of a subscription's notifications: its jobs run one at a time, in order. */
export function notificationQueue(subscriptionId: string): string {
  return `subscription:${subscriptionId}`;
}

export const jobPayloads = {
  /** Enqueued with the subscription's creation. */
  subscription_handshake: z.object({ subscriptionId: z.uuid(), attempt: attempt.optional() }),
  /** By the triggers, for a subscription in error (job key reactivate:<id>). */
  subscription_reactivation: resourceEvent,
  /**
   * By the triggers, for an active subscription; by the tasks for a retry;
   * always in the subscription's queue (notificationQueue). A single event is
   * what the triggers enqueued before migration 0008: still taken, as a batch of one.
   */
  notification_delivery: z.union([
    notificationBatch,
    resourceEvent.transform(({ subscriptionId, ...event }): NotificationBatch => ({ subscriptionId, events: [event] })),
  ]),
  /** With a deactivation, in its transaction. */
  deactivation_alert: z.object({ alertId: z.union([z.number().int(), z.string().regex(/^\d+$/)]).transform(String) }),
  /** By graphile-worker's crontab (it passes its own bookkeeping). */
  delivery_log_cleanup: z.unknown(),
};

export type JobName = keyof typeof jobPayloads;
export type JobPayload<Name extends JobName> = z.input<(typeof jobPayloads)[Name]>;
type CheckedPayload<Name extends JobName> = z.output<(typeof jobPayloads)[Name]>;

export type EnqueueOptions = {
  /** Run no sooner than this from now. */
  delayMs?: number;
  /** graphile-worker's job key: at most one pending job per key. */
  jobKey?: string;
  /** graphile-worker's named queue: its jobs run one at a time. */
  queueName?: string;
};

/** Adds a job in the caller's transaction: it exists if and only if that transaction commits. */
export async function enqueueJob<Name extends JobName>(db: Db, task: Name, payload: JobPayload<Name>, options: EnqueueOptions = {}): Promise<void> {
  const checked = jobPayloads[task].parse(payload);
  const runAt = options.delayMs === undefined ? null : new Date(Date.now() + options.delayMs);
  await sql`SELECT graphile_worker.add_job(${task}, ${JSON.stringify(checked ?? {})}::json, run_at => ${runAt}::timestamptz, job_key => ${options.jobKey ?? null}::text, queue_name => ${options.queueName ?? null}::text)`.execute(db);
}

/** Enqueues notifications in their subscription's queue (in the caller's transaction, as enqueueJob). */
export async function enqueueNotifications(db: Db, batch: NotificationBatch, delayMs?: number): Promise<void> {
  await enqueueJob(db, 'notification_delivery', batch, { queueName: notificationQueue(batch.subscriptionId), ...(delayMs === undefined ? {} : { delayMs }) });
}

/**
 * The batch of a starting notification_delivery job, with the events of the
 * jobs waiting behind it in its queue moved into it, up to maxBatchSize
 * (webhook.take_waiting_notifications in db/migrations/0008_notification_batches.sql).
 */
export async function takeWaitingNotifications(db: Db, jobId: string): Promise<NotificationBatch> {
  const { rows } = await sql<{ payload: unknown }>`SELECT webhook.take_waiting_notifications(${jobId}::bigint, ${maxBatchSize}) AS payload`.execute(db);
  return jobPayloads.notification_delivery.parse(rows[0]?.payload);
}

/**
 * A graphile-worker task that runs only on a payload that fits the contract
 * (else the job fails, saying why). `abortSignal` is the job's: it aborts when
 * a graceful shutdown has waited long enough for the job.
 */
export function taskFor<Name extends JobName>(task: Name, run: (payload: CheckedPayload<Name>, abortSignal: AbortSignal, jobId: string) => Promise<void>): Task {
  return async (payload, helpers) => {
    const checked = jobPayloads[task].safeParse(payload);
    if (!checked.success) throw new Error(`${task}: the payload does not fit the job contract (src/db/jobs.ts): ${z.prettifyError(checked.error)}`);
    await run(checked.data as CheckedPayload<Name>, helpers.abortSignal, helpers.job.id);
  };
}
