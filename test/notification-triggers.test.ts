import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { enqueueNotifications, jobPayloads, maxBatchSize, takeWaitingNotifications, taskFor, type JobName } from '../src/db/jobs.ts';
import type { SubscriptionStatus } from '../src/db/schema.ts';
import { compileCriteria } from '../src/search/criteria.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database.drop());
beforeEach(async () => {
  await database.pool.query('DELETE FROM webhook.subscriptions');
  await database.pool.query('DELETE FROM fhir.resources');
  await database.pool.query('DELETE FROM fhir.resource_history');
  await database.pool.query('DELETE FROM graphile_worker._private_jobs');
});

/** A stored subscription, as the API would store it (secrets are irrelevant to the triggers). */
async function subscribe(criteria: string, status: SubscriptionStatus): Promise<string> {
  const compiled = compileCriteria(criteria);
  const { rows } = await database.pool.query<{ id: string }>(
    `INSERT INTO webhook.subscriptions (status, criteria, resource_type, compiled_criteria, match, match_deleted, endpoint,
       headers_encrypted, signing_secret_encrypted, secret_is_generated, reason, ended_at)
     VALUES ($1::webhook.subscription_status, $2, $3, $4, $5, $6, 'https://receiver.example.org/', '\\x00', '\\x00', true, '-', CASE WHEN $1::text = 'off' THEN now() END)
     RETURNING id`,
    [status, criteria, compiled.resourceType, JSON.stringify(compiled), compiled.match, compiled.matchDeleted],
  );
  return rows[0]!.id;
}

type Event = { resourceType: string; resourceId: string; versionId: number; deleted: boolean };
type Job = { task: string; key: string | null; queue: string | null; payload: { subscriptionId: string; events?: Event[] } & Partial<Event> };

async function jobs(): Promise<Job[]> {
  const { rows } = await database.pool.query<Job>(
    `SELECT jobs.task_identifier AS task, jobs.key, jobs.queue_name AS queue, private.payload
     FROM graphile_worker.jobs JOIN graphile_worker._private_jobs private USING (id)
     ORDER BY jobs.id`,
  );
  return rows;
}

/** The notification_delivery jobs' events, in order. */
async function notifiedEvents(subscriptionId?: string): Promise<Event[]> {
  return (await jobs())
    .filter((job) => job.task === 'notification_delivery' && (subscriptionId === undefined || job.payload.subscriptionId === subscriptionId))
    .flatMap((job) => job.payload.events!);
}

const appointment = (id: string, status: string, start = '2026-03-01T09:00:00Z') => JSON.stringify({ resourceType: 'Appointment', id, status, start, participant: [] });

describe('notification triggers on fhir.resources', () => {
  it('enqueue jobs whose task names and payloads fit the job contract (src/db/jobs.ts)', async () => {
    await subscribe('Appointment?status=booked', 'active');
    await subscribe('Appointment?status=noshow', 'error');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2)`, [appointment('c1', 'booked'), appointment('c2', 'noshow')]);
    await database.pool.query(`DELETE FROM fhir.resources WHERE id = 'c1'`);
    const enqueued = await jobs();
    expect(enqueued.map((job) => job.task).sort()).toEqual(['notification_delivery', 'notification_delivery', 'subscription_reactivation']);
    for (const job of enqueued) {
      expect(job.task in jobPayloads, job.task).toBe(true);
      const checked = jobPayloads[job.task as JobName].safeParse(job.payload);
      expect(checked.success, `${job.task} ${JSON.stringify(job.payload)}: ${checked.error?.message}`).toBe(true);
    }
    // And a payload that does not fit is refused by the task, saying why.
    await expect(taskFor('notification_delivery', async () => undefined)({ subscriptionId: 'x' }, {} as never)).rejects.toThrow(
      /notification_delivery: the payload does not fit the job contract/,
    );
  });

  it('enqueue one batch of the matching rows of a statement for each active subscription, in its queue', async () => {
    const booked = await subscribe('Appointment?status=booked', 'active');
    const all = await subscribe('Appointment', 'active');
    await subscribe('Appointment?status=booked&_include=Appointment:patient', 'requested');
    await subscribe('Appointment?status=proposed', 'off');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2), ($3)`, [
      appointment('a1', 'booked'),
      appointment('a2', 'proposed'),
      appointment('a3', 'booked'),
    ]);
    const enqueued = await jobs();
    expect(enqueued).toHaveLength(2);
    expect(enqueued.find((job) => job.payload.subscriptionId === booked)).toEqual({
      task: 'notification_delivery',
      key: null,
      queue: `subscription:${booked}`,
      payload: {
        subscriptionId: booked,
        events: [
          { resourceType: 'Appointment', resourceId: 'a1', versionId: 1, deleted: false },
          { resourceType: 'Appointment', resourceId: 'a3', versionId: 1, deleted: false },
        ],
      },
    });
    expect((await notifiedEvents(all)).map((event) => event.resourceId)).toEqual(['a1', 'a2', 'a3']);
  });

  it('evaluate the criteria against the current value on update', async () => {
    const booked = await subscribe('Appointment?status=booked', 'active');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [appointment('a1', 'proposed')]);
    await database.pool.query(`UPDATE fhir.resources SET content = content || '{"status":"booked"}' WHERE id = 'a1'`);
    expect(await notifiedEvents(booked)).toEqual([{ resourceType: 'Appointment', resourceId: 'a1', versionId: 2, deleted: false }]);
  });

  it('evaluate only active, status and :missing on deletions, with the deletion version', async () => {
    const old = await subscribe('Appointment?date=lt1900-01-01&status=booked', 'active');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2)`, [appointment('a1', 'booked'), appointment('a2', 'cancelled')]);
    expect(await jobs()).toEqual([]);
    await database.pool.query(`DELETE FROM fhir.resources WHERE resource_type = 'Appointment'`);
    expect(await notifiedEvents(old)).toEqual([{ resourceType: 'Appointment', resourceId: 'a1', versionId: 2, deleted: true }]);
  });

  it('enqueue one reactivation per subscription in error, whatever the number of events', async () => {
    const failing = await subscribe('Appointment?status=booked', 'error');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2), ($3)`, [
      appointment('a1', 'booked'),
      appointment('a2', 'booked'),
      appointment('a3', 'cancelled'),
    ]);
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [appointment('a4', 'booked')]);
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [appointment('a5', 'cancelled')]);
    const enqueued = await jobs();
    expect(enqueued).toHaveLength(1);
    expect(enqueued[0]).toMatchObject({ task: 'subscription_reactivation', key: `reactivate:${failing}`, payload: { subscriptionId: failing, resourceId: 'a4' } });
  });

  it('notify Bundle subscriptions of documents only', async () => {
    await subscribe('Bundle', 'active');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2)`, [
      JSON.stringify({ resourceType: 'Bundle', id: 'doc', type: 'document', entry: [] }),
      JSON.stringify({ resourceType: 'Bundle', id: 'coll', type: 'collection', entry: [] }),
    ]);
    expect((await notifiedEvents()).map((event) => event.resourceId)).toEqual(['doc']);
  });

  it('enqueue nothing for a rolled-back write', async () => {
    await subscribe('Appointment', 'active');
    const client = await database.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [appointment('a1', 'booked')]);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await jobs()).toEqual([]);
  });

  it('never fail a write because a predicate cannot be evaluated on odd content', async () => {
    await subscribe('Appointment?date=ge2026-01-01', 'active');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2)`, [
      JSON.stringify({ resourceType: 'Appointment', id: 'odd', status: 'booked', start: '2026-13-45T99:99:99Z' }),
      appointment('fine', 'booked'),
    ]);
    expect((await notifiedEvents()).map((event) => event.resourceId)).toEqual(['fine']);
  });

  it('enqueue 20,000 deliveries for a 20,000-row statement in batches of 100, in one add_jobs call', async () => {
    await subscribe('Appointment?status=booked', 'active');
    await database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Appointment', 'id', 'bulk-' || n, 'status', 'booked', 'participant', '[]'::jsonb)
       FROM generate_series(1, 20000) n`,
    );
    const { rows } = await database.pool.query(`SELECT count(DISTINCT private.id)::int AS jobs, count(*)::int AS events, count(DISTINCT event ->> 'resourceId')::int AS distinct_resources
      FROM graphile_worker._private_jobs private CROSS JOIN json_array_elements(private.payload -> 'events') event`);
    expect(rows[0]).toEqual({ jobs: 200, events: 20000, distinct_resources: 20000 });
  });

  it('let a starting job take the jobs waiting behind it in its queue, in order, up to the batch size', async () => {
    const booked = await subscribe('Appointment?status=booked', 'active');
    for (const id of ['a1', 'a2', 'a3']) await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [appointment(id, 'booked')]);
    // A retry that is not due yet stays where it is.
    await enqueueNotifications(database.db, { subscriptionId: booked, events: [{ resourceType: 'Appointment', resourceId: 'later', versionId: 1, deleted: false }] }, 60_000);
    // As graphile-worker does when a worker takes the job.
    await database.pool.query(`UPDATE graphile_worker._private_jobs SET locked_at = now(), locked_by = 'test-pool' WHERE id = $1`, [await firstJobId()]);
    const batch = await takeWaitingNotifications(database.db, await firstJobId());
    expect(batch).toEqual({ subscriptionId: booked, events: ['a1', 'a2', 'a3'].map((resourceId) => ({ resourceType: 'Appointment', resourceId, versionId: 1, deleted: false })) });
    const left = await jobs();
    expect(left.map((job) => job.payload.events!.map((event) => event.resourceId))).toEqual([['a1', 'a2', 'a3'], ['later']]);

    // A full batch takes nothing more.
    await database.pool.query('DELETE FROM graphile_worker._private_jobs');
    await database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Appointment', 'id', 'bulk-' || n, 'status', 'booked', 'participant', '[]'::jsonb)
       FROM generate_series(1, $1::int) n`,
      [maxBatchSize],
    );
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [appointment('after', 'booked')]);
    expect((await takeWaitingNotifications(database.db, await firstJobId())).events).toHaveLength(maxBatchSize);
    expect(await jobs()).toHaveLength(2);
  });
});

async function firstJobId(): Promise<string> {
  const { rows } = await database.pool.query<{ id: string }>('SELECT min(id)::text AS id FROM graphile_worker._private_jobs');
  return rows[0]!.id;
}
