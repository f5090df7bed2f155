import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { SubscriptionStatus } from '../../src/db/schema.ts';
import { claimCandidates, claimEvents, claimNextBatch, maxEventsPerClaim, subscriptionsToClaim } from '../../src/db/sql/claim-subscription-events.ts';
import { eventsChannel, settleClaim } from '../../src/dispatch/events/log.ts';
import { jobPayloads, taskFor, type JobName } from '../../src/db/jobs.ts';
import { createTestDatabase, storeClassicSubscription, type TestDatabase } from '../support/database.ts';

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
  await database.pool.query(
    `INSERT INTO webhook.worker_pools (pool_id, host, process_id, kind) VALUES ('sender-a', 'test', 1, 'event-sender'), ('sender-b', 'test', 2, 'event-sender')`,
  );
});
afterAll(() => database.drop());
beforeEach(async () => {
  await database.pool.query('DELETE FROM webhook.subscriptions');
  await database.pool.query('DELETE FROM webhook.subscription_events');
  await database.pool.query('DELETE FROM fhir.resources');
  await database.pool.query('DELETE FROM fhir.resource_history');
  await database.pool.query(`SELECT graphile_worker.complete_jobs(array(SELECT id FROM graphile_worker.jobs))`);
  // Both senders live (heard from now), whatever the time the tests before took.
  await database.pool.query(`UPDATE webhook.worker_pools SET last_seen = now() WHERE pool_id IN ('sender-a', 'sender-b')`);
});

/** A stored subscription, as the API would store it (secrets are irrelevant to the triggers). */
const subscribe = (criteria: string, status: SubscriptionStatus) => storeClassicSubscription(database.pool, criteria, status);

type Event = { resourceType: string; resourceId: string; versionId: number; deleted: boolean };

/** The events the triggers recorded, in log order (of one subscription if given). */
async function recordedEvents(subscriptionId?: string): Promise<Event[]> {
  const { rows } = await database.pool.query<Event & { subscriptionId: string }>(
    `SELECT subscription_id AS "subscriptionId", resource_type AS "resourceType", resource_id AS "resourceId", version_id AS "versionId", deleted
     FROM webhook.subscription_events ORDER BY id`,
  );
  return rows.filter((row) => subscriptionId === undefined || row.subscriptionId === subscriptionId).map(({ subscriptionId: _, ...event }) => event);
}

/** graphile-worker's jobs, through its public view; the payload from its table (graphile-worker shows it to tasks only). */
async function jobs(): Promise<{ task: string; key: string | null; payload: unknown }[]> {
  const { rows } = await database.pool.query(
    `SELECT jobs.task_identifier AS task, jobs.key, private.payload
     FROM graphile_worker.jobs JOIN graphile_worker._private_jobs private USING (id) ORDER BY jobs.id`,
  );
  return rows;
}

const appointment = (id: string, status: string, start = '2026-03-01T09:00:00Z') =>
  JSON.stringify({ resourceType: 'Appointment', id, status, start, participant: [] });

describe('the notification trigger on fhir.resources', () => {
  it('records an event per active subscription and matching row, and a reactivation job whose payload fits the job contract', async () => {
    const booked = await subscribe('Appointment?status=booked', 'active');
    const all = await subscribe('Appointment', 'active');
    await subscribe('Appointment?status=booked&_include=Appointment:patient', 'requested');
    await subscribe('Appointment?status=proposed', 'off');
    const failing = await subscribe('Appointment?status=noshow', 'error');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2), ($3), ($4)`, [
      appointment('a1', 'booked'),
      appointment('a2', 'proposed'),
      appointment('a3', 'booked'),
      appointment('a4', 'noshow'),
    ]);
    expect(await recordedEvents(booked)).toEqual(['a1', 'a3'].map((resourceId) => ({ resourceType: 'Appointment', resourceId, versionId: 1, deleted: false })));
    expect((await recordedEvents(all)).map((event) => event.resourceId)).toEqual(['a1', 'a2', 'a3', 'a4']);
    const { rows } = await database.pool.query(`SELECT DISTINCT status, event_number, attempts, not_before FROM webhook.subscription_events`);
    expect(rows).toEqual([{ status: 'pending', event_number: null, attempts: 0, not_before: null }]);

    const enqueued = await jobs();
    expect(enqueued.map(({ task, key }) => ({ task, key }))).toEqual([{ task: 'subscription_reactivation', key: `reactivate:${failing}` }]);
    for (const job of enqueued) {
      const checked = jobPayloads[job.task as JobName].safeParse(job.payload);
      expect(checked.success, `${job.task} ${JSON.stringify(job.payload)}: ${checked.error?.message}`).toBe(true);
    }
    // And a payload that does not fit is refused by the task, saying why.
    await expect(taskFor('subscription_reactivation', async () => undefined)({ subscriptionId: 'x' }, {} as never)).rejects.toThrow(
      /subscription_reactivation: the payload does not fit the job contract/,
    );
  });

  it('evaluates the criteria against the current value on update', async () => {
    const booked = await subscribe('Appointment?status=booked', 'active');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [appointment('a1', 'proposed')]);
    await database.pool.query(`UPDATE fhir.resources SET content = content || '{"status":"booked"}' WHERE id = 'a1'`);
    expect(await recordedEvents(booked)).toEqual([{ resourceType: 'Appointment', resourceId: 'a1', versionId: 2, deleted: false }]);
  });

  it('evaluates only active, status and :missing on deletions, with the deletion version', async () => {
    const old = await subscribe('Appointment?date=lt1900-01-01&status=booked', 'active');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2)`, [appointment('a1', 'booked'), appointment('a2', 'cancelled')]);
    expect(await recordedEvents()).toEqual([]);
    await database.pool.query(`DELETE FROM fhir.resources WHERE resource_type = 'Appointment'`);
    expect(await recordedEvents(old)).toEqual([{ resourceType: 'Appointment', resourceId: 'a1', versionId: 2, deleted: true }]);
  });

  it('enqueues one reactivation per subscription in error, whatever the number of events', async () => {
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
    expect(enqueued[0]).toMatchObject({
      task: 'subscription_reactivation',
      key: `reactivate:${failing}`,
      payload: { subscriptionId: failing, resourceId: 'a4' },
    });
    expect(await recordedEvents()).toEqual([]);
  });

  it('notifies Bundle subscriptions of documents only', async () => {
    await subscribe('Bundle', 'active');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2)`, [
      JSON.stringify({ resourceType: 'Bundle', id: 'doc', type: 'document', entry: [] }),
      JSON.stringify({ resourceType: 'Bundle', id: 'coll', type: 'collection', entry: [] }),
    ]);
    expect((await recordedEvents()).map((event) => event.resourceId)).toEqual(['doc']);
  });

  it('records nothing for a rolled-back write', async () => {
    await subscribe('Appointment', 'active');
    const client = await database.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [appointment('a1', 'booked')]);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await recordedEvents()).toEqual([]);
  });

  it('never fails a write because a predicate cannot be evaluated on odd content', async () => {
    await subscribe('Appointment?date=ge2026-01-01', 'active');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2)`, [
      JSON.stringify({ resourceType: 'Appointment', id: 'odd', status: 'booked', start: '2026-13-45T99:99:99Z' }),
      appointment('fine', 'booked'),
    ]);
    expect((await recordedEvents()).map((event) => event.resourceId)).toEqual(['fine']);
  });

  it(`notifies ${eventsChannel} once per statement that recorded events, at its commit, and never for one that matched nothing`, async () => {
    await subscribe('Appointment?status=booked', 'active');
    const listener = new pg.Client({ connectionString: database.url });
    await listener.connect();
    const notifications: string[] = [];
    listener.on('notification', (message) => notifications.push(message.channel));
    await listener.query(`LISTEN ${eventsChannel}`);
    try {
      const settle = () => new Promise((resolve) => setTimeout(resolve, 200));
      await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [appointment('none', 'cancelled')]);
      await settle();
      expect(notifications).toEqual([]);
      await database.pool.query(
        `INSERT INTO fhir.resources (content)
         SELECT jsonb_build_object('resourceType', 'Appointment', 'id', 'bulk-' || n, 'status', 'booked', 'participant', '[]'::jsonb)
         FROM generate_series(1, 20000) n`,
      );
      await settle();
      expect(notifications).toEqual([eventsChannel]);
      const { rows } = await database.pool.query(
        `SELECT count(*)::int AS events, count(DISTINCT resource_id)::int AS resources FROM webhook.subscription_events`,
      );
      expect(rows[0]).toEqual({ events: 20000, resources: 20000 });
    } finally {
      await listener.end();
    }
  });
});

describe('claims (db/functions/webhook.claim_subscription_events.sql)', () => {
  const write = (id: string, status = 'booked') => database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [appointment(id, status)]);
  const release = (senderId: string, subscriptionId: string) => settleClaim(database.db, { senderId, subscriptionId }, [], [], { resetFailureCount: false });

  it('take the due events of several subscriptions at once, each subscription by one sender at a time', async () => {
    // sender-b silent for a minute: sender-a is the only live sender, and every subscription its share.
    await database.pool.query(`UPDATE webhook.worker_pools SET last_seen = now() - interval '1 minute' WHERE pool_id = 'sender-b'`);
    const first = await subscribe('Appointment?status=booked', 'active');
    const second = await subscribe('Appointment', 'active');
    await write('a1');
    await write('a2');
    const claims = await claimEvents(database.db, 'sender-a', 10);
    expect(claims.map((claim) => claim.subscriptionId).sort()).toEqual([first, second].sort());
    for (const claim of claims)
      expect(claim.events.map((event) => [event.resourceId, event.eventNumber])).toEqual([
        ['a1', 1],
        ['a2', 2],
      ]);
    // Claimed: another sender finds nothing, even once more events come.
    await write('a3');
    expect(await claimEvents(database.db, 'sender-b', 10)).toEqual([]);
    // Released without an outcome: the events wait, numbered, for the next claim, which numbers the new one next.
    await release('sender-a', first);
    const again = await claimEvents(database.db, 'sender-b', 10);
    expect(again.map((claim) => claim.subscriptionId)).toEqual([first]);
    expect(again[0]!.events.map((event) => [event.resourceId, event.eventNumber])).toEqual([
      ['a1', 1],
      ['a2', 2],
      ['a3', 3],
    ]);
  });

  it('take their share each, between live senders: the subscriptions with pending events over the senders, oldest pending event first', async () => {
    const statuses = ['proposed', 'noshow', 'cancelled', 'booked'];
    const subscriptions = new Map<string, string>();
    for (const status of statuses) subscriptions.set(status, await subscribe(`Appointment?status=${status}`, 'active'));
    // One write per subscription, in this order: the first waits longest.
    for (const status of statuses) await write(`for-${status}`, status);
    const claimed = async (senderId: string) => (await claimEvents(database.db, senderId, 10)).map((claim) => claim.subscriptionId).sort();
    const of = (...chosen: string[]) => chosen.map((status) => subscriptions.get(status)!).sort();
    expect(await claimed('sender-a')).toEqual(of('proposed', 'noshow'));
    // Its share (4 subscriptions, 2 senders) is taken: the rest is left to the other sender.
    expect(await claimed('sender-a')).toEqual([]);
    expect(await claimed('sender-b')).toEqual(of('cancelled', 'booked'));
    // Released with its event pending, it is sender-a's to take again, not sender-b's, which holds its share.
    await release('sender-a', subscriptions.get('proposed')!);
    expect(await claimed('sender-b')).toEqual([]);
    expect(await claimed('sender-a')).toEqual(of('proposed'));
  });

  it('can be made from a list kept between claims, in its order, passing over what was claimed, sent or deactivated since', async () => {
    await database.pool.query(`UPDATE webhook.worker_pools SET last_seen = now() - interval '1 minute' WHERE pool_id = 'sender-b'`);
    const statuses = ['proposed', 'noshow', 'cancelled', 'booked', 'pending'];
    const subscriptions = new Map<string, string>();
    for (const status of statuses) subscriptions.set(status, await subscribe(`Appointment?status=${status}`, 'active'));
    for (const status of statuses) await write(`for-${status}`, status);
    const of = (status: string) => subscriptions.get(status)!;
    // The scan: every subscription with pending events, the oldest pending event first, and sender-a's share (the only live sender).
    const candidates = await subscriptionsToClaim(database.db, 'sender-a');
    expect(candidates).toEqual({ share: 5, subscriptionIds: statuses.map(of) });
    // Since: another sender claimed one, another's events went (as a sender records them), another was deactivated.
    expect((await claimCandidates(database.db, 'sender-b', [of('proposed')], 1)).map((claim) => claim.subscriptionId)).toEqual([of('proposed')]);
    await database.pool.query(`UPDATE webhook.subscription_events SET status = 'delivered', settled_at = now() WHERE subscription_id = $1`, [of('noshow')]);
    await database.pool.query(`UPDATE webhook.subscriptions SET status = 'error', error = 'test' WHERE id = $1`, [of('cancelled')]);
    const claimed = await claimCandidates(database.db, 'sender-a', candidates.subscriptionIds, 1);
    expect(claimed.map((claim) => [claim.subscriptionId, claim.events.map((event) => event.resourceId)])).toEqual([[of('booked'), ['for-booked']]]);
    const { rows } = await database.pool.query(
      `SELECT stream.subscription_id, claim.claimed_by
       FROM webhook.subscription_streams stream LEFT JOIN webhook.subscription_claims claim USING (subscription_id)`,
    );
    expect(new Map(rows.map((row) => [row.subscription_id, row.claimed_by]))).toEqual(
      new Map([
        [of('proposed'), 'sender-b'],
        [of('noshow'), null],
        [of('cancelled'), null],
        [of('booked'), 'sender-a'],
        [of('pending'), null],
      ]),
    );
    // The rest of the list, for the next claim; a candidate named twice is claimed once.
    const rest = await claimCandidates(database.db, 'sender-a', [of('pending'), of('pending')], 4);
    expect(rest.map((claim) => [claim.subscriptionId, claim.events.map((event) => event.resourceId)])).toEqual([[of('pending'), ['for-pending']]]);
  });

  it('take at most maxEventsPerClaim events of a subscription, numbered on from the last, gapless', async () => {
    const booked = await subscribe('Appointment?status=booked', 'active');
    await database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Appointment', 'id', 'bulk-' || n, 'status', 'booked', 'participant', '[]'::jsonb)
       FROM generate_series(1, $1::int) n`,
      [maxEventsPerClaim + 5],
    );
    const [claim] = await claimEvents(database.db, 'sender-a', 10);
    expect(claim!.events).toHaveLength(maxEventsPerClaim);
    expect(claim!.events.map((event) => event.eventNumber)).toEqual(Array.from({ length: maxEventsPerClaim }, (_, n) => n + 1));
    await settleClaim(
      database.db,
      { senderId: 'sender-a', subscriptionId: booked },
      claim!.events.map((event) => ({ eventId: event.eventId, status: 'delivered', attempts: 1, notBefore: null })),
      [],
      { resetFailureCount: false },
    );
    const [rest] = await claimEvents(database.db, 'sender-a', 10);
    expect(rest!.events.map((event) => event.eventNumber)).toEqual([101, 102, 103, 104, 105]);
    const { rows } = await database.pool.query(`SELECT webhook.last_event_number($1)::int AS last_event_number`, [booked]);
    expect(rows[0]).toEqual({ last_event_number: 105 });
  });

  it('go on, for the sender holding a subscription, with its events after its batch, numbered on, the claim kept', async () => {
    const booked = await subscribe('Appointment?status=booked', 'active');
    await database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Appointment', 'id', 'bulk-' || n, 'status', 'booked', 'participant', '[]'::jsonb)
       FROM generate_series(1, $1::int) n`,
      [maxEventsPerClaim + 5],
    );
    const [claim] = await claimEvents(database.db, 'sender-a', 10);
    const last = claim!.events.at(-1)!.eventId;
    const nextEvents = async (sender: string, subscriptionId: string, after: string) =>
      (await claimNextBatch(database.db, sender, subscriptionId, after))?.events ?? [];
    // Only the sender holding it, and only the events after its batch (still pending while it sends them).
    expect(await claimNextBatch(database.db, 'sender-b', booked, last)).toBeUndefined();
    const more = await nextEvents('sender-a', booked, last);
    expect(more.map((event) => event.eventNumber)).toEqual([101, 102, 103, 104, 105]);
    const firstBatch = new Set(claim!.events.map((event) => event.resourceId));
    expect(more.filter((event) => firstBatch.has(event.resourceId))).toEqual([]);
    // The first batch recorded with the claim kept: the stream is still sender-a's.
    await settleClaim(
      database.db,
      { senderId: 'sender-a', subscriptionId: booked },
      claim!.events.map((event) => ({ eventId: event.eventId, status: 'delivered', attempts: 1, notBefore: null })),
      [],
      { resetFailureCount: false, keepClaim: true },
    );
    const { rows } = await database.pool.query(`SELECT claimed_by FROM webhook.subscription_claims WHERE subscription_id = $1`, [booked]);
    expect(rows).toEqual([{ claimed_by: 'sender-a' }]);
    expect(await nextEvents('sender-a', booked, more.at(-1)!.eventId)).toEqual([]);
    await write('later');
    const later = await nextEvents('sender-a', booked, more.at(-1)!.eventId);
    expect(later.map((event) => [event.resourceId, event.eventNumber])).toEqual([['later', 106]]);
    // Deactivated: nothing more.
    await write('after-off');
    await database.pool.query(`UPDATE webhook.subscriptions SET status = 'error', error = 'test' WHERE id = $1`, [booked]);
    expect(await nextEvents('sender-a', booked, later[0]!.eventId)).toEqual([]);
  });

  it('set aside, unnumbered, a version older than another in the claim or than one already sent', async () => {
    const booked = await subscribe('Appointment', 'active');
    await write('a1');
    await database.pool.query(`UPDATE fhir.resources SET content = content || '{"comment":"v2"}' WHERE id = 'a1'`);
    await write('a2');
    const [claim] = await claimEvents(database.db, 'sender-a', 10);
    expect(claim!.events.map((event) => [event.resourceId, event.versionId, event.eventNumber])).toEqual([
      ['a1', 2, 1],
      ['a2', 1, 2],
    ]);
    // a2's version 1 fails and is retried later; meanwhile version 2 is sent.
    await settleClaim(
      database.db,
      { senderId: 'sender-a', subscriptionId: booked },
      claim!.events.map((event) => ({
        eventId: event.eventId,
        status: event.resourceId === 'a2' ? 'pending' : 'delivered',
        attempts: 1,
        notBefore: event.resourceId === 'a2' ? new Date(Date.now() + 60_000) : null,
      })),
      [],
      { resetFailureCount: false },
    );
    await database.pool.query(`UPDATE fhir.resources SET content = content || '{"comment":"v2"}' WHERE id = 'a2'`);
    const [next] = await claimEvents(database.db, 'sender-a', 10);
    expect(next!.events.map((event) => [event.resourceId, event.versionId, event.eventNumber])).toEqual([['a2', 2, 3]]);
    await database.pool.query(
      `INSERT INTO webhook.delivery_attempts (subscription_id, kind, resource_type, resource_id, version_id, event_number, attempt, started_at, duration_ms, outcome)
       VALUES ($1, 'notification', 'Appointment', 'a2', 2, 3, 1, now(), 1, 'delivered')`,
      [booked],
    );
    await release('sender-a', booked);
    // The retry of version 1 comes due after version 2 was sent: it is set aside, not sent.
    await database.pool.query(`UPDATE webhook.subscription_events SET not_before = NULL WHERE resource_id = 'a2' AND version_id = 1`);
    const [late] = await claimEvents(database.db, 'sender-a', 10);
    expect(late!.events.map((event) => [event.resourceId, event.versionId])).toEqual([['a2', 2]]);
    const { rows } = await database.pool.query(
      `SELECT resource_id, version_id, status, event_number FROM webhook.subscription_events WHERE status = 'superseded' ORDER BY id`,
    );
    expect(rows).toEqual([
      { resource_id: 'a1', version_id: 1, status: 'superseded', event_number: null },
      { resource_id: 'a2', version_id: 1, status: 'superseded', event_number: '2' },
    ]);
  });

  it('leave a retry until it is due, and abandon the pending events of a subscription that leaves active', async () => {
    const booked = await subscribe('Appointment?status=booked', 'active');
    await write('a1');
    const [claim] = await claimEvents(database.db, 'sender-a', 10);
    await settleClaim(
      database.db,
      { senderId: 'sender-a', subscriptionId: booked },
      [{ eventId: claim!.events[0]!.eventId, status: 'pending', attempts: 1, notBefore: new Date(Date.now() + 60_000) }],
      [],
      {
        resetFailureCount: false,
      },
    );
    expect(await claimEvents(database.db, 'sender-a', 10)).toEqual([]);
    await database.pool.query(`UPDATE webhook.subscriptions SET status = 'error', error = 'test' WHERE id = $1`, [booked]);
    const { rows } = await database.pool.query(`SELECT status, attempts FROM webhook.subscription_events`);
    expect(rows).toEqual([{ status: 'abandoned', attempts: 1 }]);
  });

  it('are freed when their sender is found dead', async () => {
    const booked = await subscribe('Appointment?status=booked', 'active');
    await database.pool.query(
      `INSERT INTO webhook.worker_pools (pool_id, host, process_id, kind, last_seen) VALUES ('sender-dead', 'gone', 3, 'event-sender', now() - interval '1 minute')`,
    );
    await write('a1');
    expect(await claimEvents(database.db, 'sender-dead', 10)).toHaveLength(1);
    expect(await claimEvents(database.db, 'sender-a', 10)).toEqual([]);
    const { rows } = await database.pool.query(`SELECT pool_id, kind FROM webhook.release_work_of_dead_worker_pools()`);
    expect(rows).toEqual([{ pool_id: 'sender-dead', kind: 'event-sender' }]);
    const [claim] = await claimEvents(database.db, 'sender-a', 10);
    expect(claim).toMatchObject({ subscriptionId: booked, events: [{ resourceId: 'a1', eventNumber: 1 }] });
  });
});
