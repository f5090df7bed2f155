import type { Task } from 'graphile-worker';
import { sql } from 'kysely';
import { z } from 'zod';
import type { Db } from './database.ts';

/**
 * The job queue's contract: every graphile-worker job of the service, its task
 * name and its payload. Whoever enqueues a job goes through enqueueJob (the
 * subscription store and state machine, the tasks); every task checks its
 * payload with taskFor when the job starts. The notification trigger builds
 * the reactivation payload in SQL (db/functions/webhook.event_payload.sql):
 * test/db/notification-triggers.test.ts pins it to resourceEvent.
 *
 * Notifications are not jobs: they are events of the subscription event log
 * (src/dispatch/events/).
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
  /** 1 when absent; a retry of the version before the event log counted up. */
  attempt: attempt.optional(),
});
export type ResourceEvent = z.infer<typeof resourceEvent>;

/** A resource version as an event names it, without its subscription. */
export type VersionEvent = Omit<ResourceEvent, 'subscriptionId' | 'attempt'>;

/** What an event is, as one string ("Patient/7/_history/3"): a version, a deletion being a version of its own. */
export function eventKey({ resourceType, resourceId, versionId }: Pick<VersionEvent, 'resourceType' | 'resourceId' | 'versionId'>): string {
  return `${resourceType}/${resourceId}/_history/${versionId}`;
}

/**
 * A notification job of the version before the event log (migration 0018): a
 * batch (0008 to 0017) or a single event (before 0008). Still taken, and moved
 * into the log, for the jobs a database held when it was upgraded.
 */
const legacyNotification = z.union([
  z.object({ subscriptionId: z.uuid(), events: z.array(resourceEvent.omit({ subscriptionId: true })).min(1) }),
  resourceEvent.transform(({ subscriptionId, ...event }) => ({ subscriptionId, events: [event] })),
]);
export type LegacyNotification = z.output<typeof legacyNotification>;

export const jobPayloads = {
  /** Enqueued with the subscription's creation (job key handshake:<id>). */
  subscription_handshake: z.object({ subscriptionId: z.uuid(), attempt: attempt.optional() }),
  /** By the notification trigger, for a subscription in error (job key reactivate:<id>). */
  subscription_reactivation: resourceEvent,
  /** By the CLI's `subscriptions reactivate`, with its request row (webhook.reactivation_requests; job key reactivation-request:<requestId>). */
  subscription_reactivation_request: z.object({ requestId: z.uuid() }),
  /** Left by the version before the event log: moved into it. */
  notification_delivery: legacyNotification,
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
};

/** Adds a job in the caller's transaction (graphile-worker's add_job): it exists if and only if that transaction commits. */
export async function enqueueJob<Name extends JobName>(db: Db, task: Name, payload: JobPayload<Name>, options: EnqueueOptions = {}): Promise<void> {
  const checked = jobPayloads[task].parse(payload);
  const runAt = options.delayMs === undefined ? null : new Date(Date.now() + options.delayMs);
  await sql`SELECT graphile_worker.add_job(${task}, ${JSON.stringify(checked ?? {})}::json, run_at => ${runAt}::timestamptz, job_key => ${options.jobKey ?? null}::text)`.execute(
    db,
  );
}

/**
 * A graphile-worker task that runs only on a payload that fits the contract
 * (else the job fails, saying why). `abortSignal` is the job's: it aborts when
 * a graceful shutdown has waited long enough for the job.
 */
export function taskFor<Name extends JobName>(task: Name, run: (payload: CheckedPayload<Name>, abortSignal: AbortSignal) => Promise<void>): Task {
  return async (payload, helpers) => {
    const checked = jobPayloads[task].safeParse(payload);
    if (!checked.success) throw new Error(`${task}: the payload does not fit the job contract (src/db/jobs.ts): ${z.prettifyError(checked.error)}`);
    await run(checked.data as CheckedPayload<Name>, helpers.abortSignal);
  };
}
