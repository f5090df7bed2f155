import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import type { ReactivationRequestOutcome } from '../db/schema.ts';
import { enqueueJob } from '../db/jobs.ts';

/**
 * The CLI's `subscriptions reactivate`: the operator asks the running service,
 * which sends the handshake with its own settings
 * (src/dispatch/tasks/reactivation-request.ts), and waits for its answer. The
 * CLI's environment decides nothing of the call, and a setting missing from
 * the operator's shell is never recorded against the subscriber (migration
 * 0033).
 */

/** What a worker answered; or that no worker took the request in time (withdrawn, nothing sent), or took it and did not answer in time. */
export type ReactivationAnswer =
  { outcome: ReactivationRequestOutcome; httpStatus: number | null; detail: string | null } | { outcome: 'not taken' } | { outcome: 'not answered' };

/** How long a worker that took the request has to answer: the service's handshake, after another one's in flight, is bounded well within it. */
const answerWithinMs = 120_000;
const pollMs = 100;

/**
 * Asks the running service to reactivate Subscription/`subscriptionId` for
 * `operator`, and waits: `takeWithinMs` for one of its workers to take the
 * request (else it is withdrawn), then for the answer. The request's row is
 * deleted once answered or withdrawn.
 */
export async function reactivateThroughService(
  db: Db,
  subscriptionId: string,
  operator: string,
  { takeWithinMs }: { takeWithinMs: number },
): Promise<ReactivationAnswer> {
  const id = randomUUID();
  const jobKey = `reactivation-request:${id}`;
  await db.transaction().execute(async (tx) => {
    await tx
      .insertInto('webhook.reactivation_requests')
      .values({ id, subscription_id: subscriptionId, requested_by: operator, outcome: null, http_status: null, detail: null, answered_at: null })
      .execute();
    await enqueueJob(tx, 'subscription_reactivation_request', { requestId: id }, { jobKey });
  });
  try {
    const answer = (await answerOf(db, id, takeWithinMs)) ?? (await withdraw(db, jobKey)) ?? (await answerOf(db, id, answerWithinMs));
    return answer ?? { outcome: 'not answered' };
  } finally {
    await db.deleteFrom('webhook.reactivation_requests').where('id', '=', id).execute();
  }
}

/** The request's answer once a worker has written it, or undefined after `withinMs`. */
async function answerOf(db: Db, id: string, withinMs: number): Promise<ReactivationAnswer | undefined> {
  const until = Date.now() + withinMs;
  for (;;) {
    const row = await db.selectFrom('webhook.reactivation_requests').select(['outcome', 'http_status', 'detail']).where('id', '=', id).executeTakeFirst();
    if (row?.outcome != null) return { outcome: row.outcome, httpStatus: row.http_status, detail: row.detail };
    if (Date.now() >= until) return undefined;
    await sleep(pollMs);
  }
}

/** Withdraws the request's job unless a worker runs it already (graphile-worker's remove_job leaves a running job alone): `not taken`, or undefined. */
async function withdraw(db: Db, jobKey: string): Promise<ReactivationAnswer | undefined> {
  const { rows } = await sql<{ withdrawn: boolean }>`SELECT (graphile_worker.remove_job(${jobKey})).id IS NOT NULL AS withdrawn`.execute(db);
  return rows[0]?.withdrawn === true ? { outcome: 'not taken' } : undefined;
}
