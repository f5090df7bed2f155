import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { claimEvents } from '../../src/db/sql/claim-subscription-events.ts';
import { requeueEvents } from '../../src/db/sql/resend-events.ts';
import { rotatePendingEvents } from '../../src/db/sql/rotate-pending-events.ts';
import { settleClaim } from '../../src/dispatch/events/log.ts';
import { createTestDatabase, storeClassicSubscription, type TestDatabase } from '../support/database.ts';

// The claims' working set, webhook.pending_events (migration 0034): the log's pending events, kept in step by
// triggers, in two generations of which the older is truncated by webhook.rotate_pending_events.

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
  await database.pool.query(`INSERT INTO webhook.worker_pools (pool_id, host, process_id, kind) VALUES ('sender-a', 'test', 1, 'event-sender')`);
});
afterAll(() => database.drop());
beforeEach(async () => {
  await database.pool.query('DELETE FROM webhook.subscriptions');
  await database.pool.query('TRUNCATE webhook.subscription_events');
  await database.pool.query('DELETE FROM fhir.resources');
  await database.pool.query(`UPDATE webhook.worker_pools SET last_seen = now()`);
});

const appointments = (from: number, count: number, status = 'booked') =>
  database.pool.query(
    `INSERT INTO fhir.resources (content) SELECT jsonb_build_object('resourceType', 'Appointment', 'id', 'a' || n, 'status', $3::text, 'participant', '[]'::jsonb) FROM generate_series($1::int, $2::int) n`,
    [from, from + count - 1, status],
  );

/** The pending set and the log's pending events, each as sorted 'subscription/event' strings. */
async function bothSides(): Promise<{ pendingSet: string[]; log: string[] }> {
  const { rows } = await database.pool.query<{ pending_set: string[] | null; log: string[] | null }>(
    `SELECT (SELECT array_agg(subscription_id || '/' || event_id ORDER BY event_id) FROM webhook.pending_events) AS pending_set,
            (SELECT array_agg(subscription_id || '/' || id ORDER BY id) FROM webhook.subscription_events WHERE status = 'pending') AS log`,
  );
  return { pendingSet: rows[0]!.pending_set ?? [], log: rows[0]!.log ?? [] };
}

async function expectInStep(pendingEvents: number): Promise<void> {
  const { pendingSet, log } = await bothSides();
  expect(pendingSet).toEqual(log);
  expect(log).toHaveLength(pendingEvents);
}

/** How many rows each generation's partition holds, and its heap's size in bytes (dead rows included). */
async function generations(): Promise<{ rows: number[]; bytes: number[] }> {
  const { rows } = await database.pool.query<{ rows0: number; rows1: number; bytes0: string; bytes1: string }>(
    `SELECT (SELECT count(*) FROM webhook.pending_events_0)::int AS rows0, (SELECT count(*) FROM webhook.pending_events_1)::int AS rows1,
            pg_relation_size('webhook.pending_events_0') AS bytes0, pg_relation_size('webhook.pending_events_1') AS bytes1`,
  );
  return { rows: [rows[0]!.rows0, rows[0]!.rows1], bytes: [Number(rows[0]!.bytes0), Number(rows[0]!.bytes1)] };
}

const rotate = (maxMoved = 1_000) => rotatePendingEvents(database.db, 0, maxMoved);

describe('the pending set', () => {
  it("holds exactly the log's pending events: recorded, claimed, settled, retried, resent, abandoned, deleted, truncated", async () => {
    const booked = await storeClassicSubscription(database.pool, 'Appointment?status=booked');
    const all = await storeClassicSubscription(database.pool, 'Appointment');
    await appointments(1, 10);
    await expectInStep(20);

    // Claimed (numbered, status unchanged) and settled: 3 delivered, 1 failed, the rest pending for a retry.
    const [claim] = (await claimEvents(database.db, 'sender-a', 2)).filter((claimed) => claimed.subscriptionId === booked);
    expect(claim?.events).toHaveLength(10);
    await expectInStep(20);
    const outcomes = claim!.events.map((event, n) => ({
      eventId: event.eventId,
      status: n < 3 ? ('delivered' as const) : n === 3 ? ('failed' as const) : ('pending' as const),
      attempts: 1,
      notBefore: n < 4 ? null : new Date(Date.now() + 60_000),
    }));
    await settleClaim(database.db, { senderId: 'sender-a', subscriptionId: booked }, outcomes, [], { resetFailureCount: false });
    await expectInStep(16);

    // Resent: pending again.
    const delivered = claim!.events.slice(0, 3).map((event) => event.eventId);
    expect(await requeueEvents(database.db, booked, delivered)).toHaveLength(3);
    await expectInStep(19);

    // The subscription switched off: its pending events abandoned.
    await database.pool.query(`UPDATE webhook.subscriptions SET status = 'off', ended_at = now() WHERE id = $1`, [booked]);
    await expectInStep(10);

    // A DBA deletes a pending event and settled ones; then the log.
    await database.pool.query(
      `DELETE FROM webhook.subscription_events WHERE id = (SELECT min(id) FROM webhook.subscription_events WHERE subscription_id = $1)`,
      [all],
    );
    await database.pool.query(`DELETE FROM webhook.subscription_events WHERE status <> 'pending'`);
    await expectInStep(9);
    await database.pool.query('TRUNCATE webhook.subscription_events');
    await expectInStep(0);
  });

  it('a rotation moves what the older generation still holds into the current one and truncates it', async () => {
    await storeClassicSubscription(database.pool, 'Appointment');
    await appointments(1, 5);
    const first = await generations();
    const current = first.rows.indexOf(5);
    expect(current).toBeGreaterThanOrEqual(0);

    // The other generation (empty) is truncated and becomes current; new events go there.
    expect(await rotate()).toBe(true);
    await appointments(6, 5);
    expect((await generations()).rows[1 - current]).toBe(5);

    // Settle two of the first five; the next rotation moves the other three.
    await database.pool.query(
      `UPDATE webhook.subscription_events SET status = 'delivered', settled_at = now() WHERE id IN (SELECT id FROM webhook.subscription_events ORDER BY id LIMIT 2)`,
    );
    expect(await rotate()).toBe(true);
    const after = await generations();
    expect(after.rows[current]).toBe(0);
    expect(after.bytes[current]).toBe(0);
    expect(after.rows[1 - current]).toBe(8);
    await expectInStep(8);
    // New events go to the truncated one now.
    await appointments(11, 1);
    expect((await generations()).rows[current]).toBe(1);
  });

  it('rotates at most once per period, and not while the older generation holds more than it may move', async () => {
    await storeClassicSubscription(database.pool, 'Appointment');
    expect(await rotatePendingEvents(database.db, 0, 1_000)).toBe(true);
    expect(await rotatePendingEvents(database.db, 3_600, 1_000)).toBe(false);
    await appointments(1, 3);
    expect(await rotate()).toBe(true); // the older generation was empty: the three are in the current one still
    expect(await rotate(2)).toBe(false); // now they are in the older one: three, more than two
    expect(await rotate(3)).toBe(true);
    await expectInStep(3);
  });

  it('gives up at once while a transaction holds the older generation, and rotates once it ends', async () => {
    await storeClassicSubscription(database.pool, 'Appointment');
    await appointments(1, 2);
    expect(await rotate()).toBe(true);
    const older = (await generations()).rows.indexOf(2);
    const reader = new pg.Client({ connectionString: database.url });
    await reader.connect();
    try {
      await reader.query('BEGIN');
      await reader.query(`SELECT count(*) FROM webhook.pending_events_${older}`);
      const started = Date.now();
      expect(await rotate()).toBe(false);
      expect(Date.now() - started).toBeLessThan(1_000);
      await reader.query('COMMIT');
      expect(await rotate()).toBe(true);
    } finally {
      await reader.end();
    }
    await expectInStep(2);
  });

  it("with a snapshot held, the rows settled events leave are gone from the claims' path after two rotations", async () => {
    await storeClassicSubscription(database.pool, 'Appointment');
    const report = new pg.Client({ connectionString: database.url });
    await report.connect();
    try {
      // A DBA's long report: its snapshot keeps every row settled from now on from being vacuumed.
      await report.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await report.query('SELECT count(*) FROM webhook.subscription_events');
      await appointments(1, 2_000);
      await database.pool.query(`UPDATE webhook.subscription_events SET status = 'delivered', settled_at = now()`);
      await database.pool.query('VACUUM webhook.pending_events_0, webhook.pending_events_1');
      const settled = await generations();
      expect(settled.rows).toEqual([0, 0]);
      expect(settled.bytes[0]! + settled.bytes[1]!).toBeGreaterThan(8_192); // dead rows that no vacuum may remove

      expect(await rotate()).toBe(true);
      expect(await rotate()).toBe(true);
      expect((await generations()).bytes).toEqual([0, 0]);
      const { rows } = await database.pool.query<{ bytes: string }>(
        `SELECT sum(pg_relation_size(inh.inhrelid))::text AS bytes FROM pg_inherits inh WHERE inh.inhparent = 'webhook.pending_events_by_subscription'::regclass`,
      );
      expect(Number(rows[0]!.bytes)).toBeLessThanOrEqual(2 * 8_192); // each partition's index: its metapage
      await report.query('COMMIT');
    } finally {
      await report.end();
    }
  });

  it('stays in step while writers record, a sender settles and rotations run, all at once', { timeout: 60_000 }, async () => {
    const subscriptions = await Promise.all(['Appointment', 'Appointment?status=booked'].map((criteria) => storeClassicSubscription(database.pool, criteria)));
    const until = Date.now() + 3_000;
    let rotations = 0;
    const writer = async (offset: number) => {
      for (let n = offset; Date.now() < until; n += 4) {
        const client = await database.pool.connect();
        try {
          await client.query('BEGIN');
          await client.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [
            JSON.stringify({ resourceType: 'Appointment', id: `w${n}`, status: 'booked', participant: [] }),
          ]);
          await client.query(n % 3 === 0 ? 'ROLLBACK' : 'COMMIT');
        } finally {
          client.release();
        }
      }
    };
    const settler = async () => {
      while (Date.now() < until) {
        for (const claim of await claimEvents(database.db, 'sender-a', subscriptions.length)) {
          const outcomes = claim.events.map((event, n) => ({
            eventId: event.eventId,
            status: n % 4 === 0 ? ('pending' as const) : ('delivered' as const),
            attempts: 1,
            notBefore: null,
          }));
          await settleClaim(database.db, { senderId: 'sender-a', subscriptionId: claim.subscriptionId }, outcomes, [], { resetFailureCount: false });
        }
      }
    };
    const rotator = async () => {
      while (Date.now() < until) if (await rotate(100_000)) rotations += 1;
    };
    await Promise.all([writer(0), writer(1), writer(2), writer(3), settler(), rotator()]);
    expect(rotations).toBeGreaterThan(5);
    const { pendingSet, log } = await bothSides();
    expect(pendingSet).toEqual(log);
    expect(new Set(pendingSet).size).toBe(pendingSet.length);
    expect(log.length).toBeGreaterThan(0);
  });
});
