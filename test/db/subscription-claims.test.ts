import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectDatabase } from '../../src/db/database.ts';
import { claimCandidates, claimEvents } from '../../src/db/sql/claim-subscription-events.ts';
import { settleClaim } from '../../src/dispatch/events/log.ts';
import { createTestDatabase, storeClassicSubscription, type TestDatabase } from '../support/database.ts';

// A claim is a row of webhook.subscription_claims, not a mark in the subscription's stream row (migration 0036,
// issue 35 item 5): while a snapshot is held, every version of a row written at each claim and release stays, and
// a lookup by key walks them all (a 40-minute soak's p99 grew 6.6 times on the embedded 18.4, docs/performance.md).
// The claims' table is split in the pending set's two generations and rotated with it, which must never let a
// second sender claim a subscription that is held.

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
  await database.pool.query(`INSERT INTO webhook.worker_pools (pool_id, host, process_id, kind)
                             VALUES ('sender-a', 'test', 1, 'event-sender'), ('sender-b', 'test', 2, 'event-sender')`);
});
afterAll(() => database.drop());

const bookAppointments = (prefix: string, count: number) =>
  database.pool.query(
    `INSERT INTO fhir.resources (content)
     SELECT jsonb_build_object('resourceType', 'Appointment', 'id', $1::text || n, 'status', 'booked', 'participant', '[]'::jsonb)
     FROM generate_series(1, $2::int) n`,
    [prefix, count],
  );

/** Rotates the pending set and the claims now, whenever the last rotation was (db/functions/webhook.rotate_pending_events.sql). */
const rotate = (client: pg.ClientBase | pg.Pool) => client.query(`SELECT webhook.rotate_pending_events('0 seconds', 1000) AS rotated`);

describe('a claim and its release', () => {
  it("write no version of the subscription's stream row, however many there are", async () => {
    await database.pool.query('DELETE FROM webhook.subscriptions');
    const subscription = await storeClassicSubscription(database.pool, 'Appointment?status=booked');
    // One connection, whose statistics are flushed on demand: the stream rows' updates it made are then counted.
    const sender = connectDatabase(database.url, () => undefined, { maxConnections: 1 });
    const streamUpdates = async () => {
      await sender.pool.query('SELECT pg_stat_force_next_flush()');
      await sender.pool.query('SELECT 1');
      const { rows } = await database.pool.query<{ updates: string }>(
        `SELECT n_tup_upd AS updates FROM pg_stat_user_tables WHERE relid = 'webhook.subscription_streams'::regclass`,
      );
      return Number(rows[0]!.updates);
    };
    // A DBA's report, its snapshot held throughout: nothing written meanwhile can be pruned.
    const report = new pg.Client({ connectionString: database.url });
    await report.connect();
    try {
      await report.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await report.query('SELECT count(*) FROM webhook.subscription_events');
      const before = await streamUpdates();
      for (let round = 0; round < 10; round++) {
        await bookAppointments(`round-${round}-`, 2);
        const [claim] = await claimEvents(sender.db, 'sender-a', 1);
        expect(claim?.subscriptionId).toBe(subscription);
        const outcomes = claim!.events.map((event) => ({ eventId: event.eventId, status: 'delivered' as const, attempts: 1, notBefore: null }));
        await settleClaim(sender.db, { senderId: 'sender-a', subscriptionId: subscription }, outcomes, [], { resetFailureCount: false });
      }
      expect(await streamUpdates()).toBe(before);
      const { rows } = await database.pool.query('SELECT * FROM webhook.subscription_claims');
      expect(rows).toEqual([]);
    } finally {
      await report.end();
      await sender.close();
    }
  });
});

describe("a subscription's claim", () => {
  it('stays with its sender while a rotation moves it, the other sender waiting for the rotation', async () => {
    await database.pool.query('DELETE FROM webhook.subscriptions');
    const held = await storeClassicSubscription(database.pool, 'Appointment?status=booked');
    await bookAppointments('held-', 1);
    const [claim] = await claimEvents(database.db, 'sender-a', 1);
    expect(claim?.subscriptionId).toBe(held);
    // sender-a's claim is in the generation that is now the older one, and more events are due.
    expect((await rotate(database.pool)).rows).toEqual([{ rotated: true }]);
    await bookAppointments('more-', 1);

    // A rotation in flight: sender-a's claim moved to the current generation, the older one truncated, not committed.
    const rotation = new pg.Client({ connectionString: database.url });
    await rotation.connect();
    try {
      await rotation.query('BEGIN');
      expect((await rotate(rotation)).rows).toEqual([{ rotated: true }]);
      // sender-b's claim waits for the rotation's locks: it must then see the claim where the rotation put it.
      const claimOfB = claimCandidates(database.db, 'sender-b', [held], 1);
      await waitForLockWait(database.pool);
      await rotation.query('COMMIT');
      expect(await claimOfB).toEqual([]);
    } finally {
      await rotation.end();
    }
    const { rows } = await database.pool.query('SELECT subscription_id, claimed_by FROM webhook.subscription_claims');
    expect(rows).toEqual([{ subscription_id: held, claimed_by: 'sender-a' }]);

    // Released by sender-a, it is sender-b's to claim, the events logged meanwhile.
    await settleClaim(database.db, { senderId: 'sender-a', subscriptionId: held }, [], [], { resetFailureCount: false });
    const [next] = await claimEvents(database.db, 'sender-b', 1);
    expect(next?.subscriptionId).toBe(held);
    expect(next!.events.map((event) => event.resourceId)).toEqual(['held-1', 'more-1']);
  });

  it('is passed over by a sender claiming from a list made before it, in either generation', async () => {
    await database.pool.query('DELETE FROM webhook.subscriptions');
    const subscriptions = await Promise.all(
      Array.from({ length: 3 }, (_, n) => storeClassicSubscription(database.pool, `Appointment?status=booked&_id:not=x${n}`)),
    );
    await bookAppointments('listed-', 1);
    for (const rotations of [0, 1, 2]) {
      // sender-b's list, made while every subscription was free (src/dispatch/events/sender.ts keeps it between claims).
      const { rows: listed } = await database.pool.query<{ candidates: string[] }>(`SELECT candidates FROM webhook.subscriptions_to_claim('sender-b')`);
      expect([...listed[0]!.candidates].sort()).toEqual([...subscriptions].sort());
      const ofA = await claimEvents(database.db, 'sender-a', 2);
      expect(ofA).toHaveLength(2);
      for (let n = 0; n < rotations; n++) expect((await rotate(database.pool)).rows).toEqual([{ rotated: true }]);
      const ofB = await claimCandidates(database.db, 'sender-b', listed[0]!.candidates, 3);
      const claimedByA = ofA.map((claim) => claim.subscriptionId);
      expect(ofB.map((claim) => claim.subscriptionId)).toEqual(subscriptions.filter((id) => !claimedByA.includes(id)));
      // Released unsettled: the same events are due again for the next round.
      for (const [sender, claims] of [
        ['sender-a', ofA],
        ['sender-b', ofB],
      ] as const) {
        for (const claim of claims)
          await settleClaim(database.db, { senderId: sender, subscriptionId: claim.subscriptionId }, [], [], { resetFailureCount: false });
      }
    }
  });
});

/** Until a session of the database waits for a lock. */
async function waitForLockWait(pool: pg.Pool): Promise<void> {
  for (let tries = 0; tries < 200; tries++) {
    const { rows } = await pool.query(`SELECT count(*)::int AS waiting FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`);
    if (rows[0].waiting > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error('no session waited for a lock');
}
