import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, storeClassicSubscription, type TestDatabase } from '../support/database.ts';

// The claim's and the settlement's functions read the log by key whatever its statistics: a PL/pgSQL generic plan made while the log was
// small (a new deployment) is kept for the connection's life until the table is analyzed, and one that scanned the
// log whole made every later claim read every event (db/functions/webhook.prepare_claimed_events.sql).

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
  await database.pool.query(`INSERT INTO webhook.worker_pools (pool_id, host, process_id, kind) VALUES ('sender-a', 'test', 1, 'event-sender')`);
});
afterAll(() => database.drop());

const appointments = (from: number, count: number) =>
  database.pool.query(
    `INSERT INTO fhir.resources (content)
     SELECT jsonb_build_object('resourceType', 'Appointment', 'id', 'a' || n, 'status', 'booked', 'participant', '[]'::jsonb) FROM generate_series($1::int, $2::int) n`,
    [from, from + count - 1],
  );

describe("a sender's connection", () => {
  it('claims and settles by key after the log has grown, with the plans it made when the log was small and never analyzed', { timeout: 60_000 }, async () => {
    const subscriptions = await Promise.all(
      Array.from({ length: 4 }, (_, n) => storeClassicSubscription(database.pool, `Appointment?status=booked&_id:not=x${n}`)),
    );
    const sender = new pg.Client({ connectionString: database.url });
    await sender.connect();
    try {
      const claimAndSettle = async () => {
        const { rows } = await sender.query<{ subscription_id: string; event_id: string }>(
          `SELECT claimed.subscription_id, claimed.event_id FROM webhook.subscriptions_to_claim('sender-a') scanned
           CROSS JOIN LATERAL webhook.claim_events_of_subscriptions('sender-a', scanned.candidates, 4, 100, 1000000000) claimed`,
        );
        const claimed = [...new Set(rows.map((row) => row.subscription_id))];
        await sender.query(`SELECT webhook.settle_claims($1, $2, '[]')`, [
          JSON.stringify(
            claimed.map((id) => ({ sender_id: 'sender-a', subscription_id: id, keep_claim: false, next_call_at: null, reset_failure_count: true })),
          ),
          JSON.stringify(rows.map((row) => ({ id: row.event_id, status: 'delivered', attempts: 1, not_before: null }))),
        ]);
        return rows.length;
      };
      // A new deployment's first claims: a small log, plans cached (PL/pgSQL turns to a generic plan after five).
      for (let n = 0; n < 8; n++) {
        await appointments(n * 2 + 1, 2);
        expect(await claimAndSettle()).toBe(subscriptions.length * 2);
      }
      // The log grows, nobody analyzes it; then the same connection claims again.
      for (let n = 0; n < 10; n++) await appointments(1_000 + n * 500, 500);
      // On the sender's own connection: this update scans the log whole, and a connection of the pool could report that
      // scan after the count below was taken (a backend flushes its statistics at most once a second).
      await sender.query(`UPDATE webhook.subscription_events SET status = 'delivered', settled_at = now() WHERE status = 'pending'`);
      // The log's sequential scans, as the statistics count them once the sender's are flushed (it flushes when idle).
      const sequentialScans = async () => {
        await sender.query('SELECT pg_stat_force_next_flush()');
        await sender.query('SELECT 1');
        const { rows } = await database.pool.query<{ seq_scan: string }>(
          `SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'webhook.subscription_events'::regclass`,
        );
        return Number(rows[0]!.seq_scan);
      };
      const before = await sequentialScans();
      for (let n = 0; n < 5; n++) {
        await appointments(10_000 + n * 2, 2);
        expect(await claimAndSettle()).toBe(subscriptions.length * 2);
      }
      expect(await sequentialScans()).toBe(before);
    } finally {
      await sender.end();
    }
  });
});
