import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { claimEvents, type Claim } from '../../../src/db/sql/claim-subscription-events.ts';
import { settleClaims, type AttemptRow, type ClaimSettlement } from '../../../src/dispatch/events/log.ts';
import { SettleBatches } from '../../../src/dispatch/events/delivery/settle-batches.ts';
import { createTestDatabase, storeClassicSubscription, type TestDatabase } from '../../support/database.ts';

/**
 * A sender's settlements written as group commits
 * (src/dispatch/events/delivery/settle-batches.ts, issue 35, item 1): those
 * that come while a statement is written go together in the next one. The
 * statement that wrote a row is told by the row's xmin (one statement, one
 * transaction here).
 */

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
  // sender-b silent: sender-a's share is every subscription.
  await database.pool.query(`UPDATE webhook.worker_pools SET last_seen = CASE WHEN pool_id = 'sender-a' THEN now() ELSE now() - interval '1 minute' END`);
});

/** `count` active subscriptions on Patients of a family each, with `events` Patients written for each (F1z, F2z…: no family a prefix of another, as FHIR string search matches prefixes), all claimed by sender-a. */
async function claimedSubscriptions(count: number, events = 1): Promise<Claim[]> {
  for (let n = 1; n <= count; n += 1) await storeClassicSubscription(database.pool, `Patient?family=F${n}z`);
  await database.pool.query(
    `INSERT INTO fhir.resources (content)
     SELECT jsonb_build_object('resourceType', 'Patient', 'id', 'p-' || family || '-' || n, 'name', jsonb_build_array(jsonb_build_object('family', 'F' || family || 'z')))
     FROM generate_series(1, $1::int) family CROSS JOIN generate_series(1, $2::int) n`,
    [count, events],
  );
  const claims = await claimEvents(database.db, 'sender-a', count);
  expect(claims).toHaveLength(count);
  return claims;
}

/** A claim's events delivered at the first attempt, with one call recorded for each. */
function delivered(claim: Claim, events = claim.events, options: Partial<ClaimSettlement> = {}): ClaimSettlement {
  const attempts: AttemptRow[] = events.map((event) => ({
    subscription_id: claim.subscriptionId,
    kind: 'notification',
    resource_type: event.resourceType,
    resource_id: event.resourceId,
    version_id: event.versionId,
    event_number: event.eventNumber,
    attempt: 1,
    started_at: new Date(),
    duration_ms: 3,
    http_status: 200,
    outcome: 'delivered',
    error: null,
    response_excerpt: null,
  }));
  return {
    senderId: 'sender-a',
    subscriptionId: claim.subscriptionId,
    outcomes: events.map((event) => ({ eventId: event.eventId, status: 'delivered', attempts: 1, notBefore: null })),
    attempts,
    resetFailureCount: true,
    ...options,
  };
}

/** Each event's status and the transaction that wrote it last, by subscription. */
async function settledEvents(): Promise<{ subscription_id: string; status: string; written_by: string }[]> {
  const { rows } = await database.pool.query(`SELECT subscription_id, status, xmin::text AS written_by FROM webhook.subscription_events ORDER BY id`);
  return rows;
}

async function streams(): Promise<Map<string, { claimed_by: string | null; next_call_at: Date | null }>> {
  const { rows } = await database.pool.query(
    `SELECT stream.subscription_id, claim.claimed_by, stream.next_call_at
     FROM webhook.subscription_streams stream LEFT JOIN webhook.subscription_claims claim ON claim.subscription_id = stream.subscription_id`,
  );
  return new Map(rows.map((row) => [row.subscription_id, { claimed_by: row.claimed_by, next_call_at: row.next_call_at }]));
}

describe('SettleBatches', () => {
  it('writes the first settlement at once and those that came meanwhile together, each claim released only where its sender holds it', async () => {
    const claims = await claimedSubscriptions(10);
    // One of them was taken for dead from sender-a and is sender-b's now.
    const takenOver = claims[9]!.subscriptionId;
    await database.pool.query(`UPDATE webhook.subscription_claims SET claimed_by = 'sender-b' WHERE subscription_id = $1`, [takenOver]);

    const batches = new SettleBatches(database.db);
    await Promise.all(claims.map((claim) => batches.settle(delivered(claim))));

    const events = await settledEvents();
    expect(events.map((event) => event.status)).toEqual(Array(10).fill('delivered'));
    // Two statements: the first settlement alone, the nine that came while it was written together.
    const statements = new Set(events.map((event) => event.written_by));
    expect(statements.size).toBe(2);
    const { rows } = await database.pool.query(`SELECT count(*)::int AS calls FROM webhook.delivery_attempts`);
    expect(rows).toEqual([{ calls: 10 }]);
    const held = await streams();
    for (const claim of claims) expect(held.get(claim.subscriptionId)!.claimed_by).toBe(claim.subscriptionId === takenOver ? 'sender-b' : null);
  });

  it("writes a subscription's settlements in the order they came, never two in one statement", async () => {
    const [throttled, other] = await claimedSubscriptions(2, 2);
    const first = new Date('2026-11-27T10:00:00.000Z');
    const second = new Date('2026-11-27T10:00:01.000Z');
    const batches = new SettleBatches(database.db);
    // A throttled subscription's first batch (the claim kept, its next call's time left) and its second (released), as a sender sends them.
    await Promise.all([
      batches.settle(delivered(other!, other!.events.slice(0, 1))),
      batches.settle(delivered(throttled!, throttled!.events.slice(0, 1), { keepClaim: true, nextCallAt: first })),
      batches.settle(delivered(throttled!, throttled!.events.slice(1), { nextCallAt: second })),
    ]);
    const held = await streams();
    expect(held.get(throttled!.subscriptionId)).toEqual({ claimed_by: null, next_call_at: second });
    const events = (await settledEvents()).filter((event) => event.subscription_id === throttled!.subscriptionId);
    expect(events.map((event) => event.status)).toEqual(['delivered', 'delivered']);
    expect(events[0]!.written_by).not.toBe(events[1]!.written_by);
  });

  it("fails a settlement alone: a claim whose subscription was deleted does not fail its neighbours'", async () => {
    const [deleted, kept, third] = await claimedSubscriptions(3);
    const batches = new SettleBatches(database.db);
    await database.pool.query(`DELETE FROM webhook.subscriptions WHERE id = $1`, [deleted!.subscriptionId]);
    // Its calls cannot be recorded (webhook.delivery_attempts's subscription is gone), in the statement it shares with another,
    // while the first is written.
    const results = await Promise.allSettled([delivered(third!), delivered(deleted!), delivered(kept!)].map((settlement) => batches.settle(settlement)));
    expect(results.map((result) => result.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    const events = await settledEvents();
    expect(events.filter((event) => event.subscription_id !== deleted!.subscriptionId).map((event) => event.status)).toEqual(['delivered', 'delivered']);
    expect((await streams()).get(kept!.subscriptionId)!.claimed_by).toBeNull();
  });

  it('waits at most a second for a row locked elsewhere, then writes the others without waiting for it', async () => {
    const [first, blocked, free] = await claimedSubscriptions(3);
    // An operator's transaction holds the claim of one of them.
    const operator = await database.pool.connect();
    await operator.query('BEGIN');
    await operator.query('SELECT FROM webhook.subscription_claims WHERE subscription_id = $1 FOR UPDATE', [blocked!.subscriptionId]);
    const batches = new SettleBatches(database.db);
    const written: string[] = [];
    // The first alone, the two others in the next statement, which meets the lock.
    const settling = Promise.all([first, blocked, free].map((claim) => batches.settle(delivered(claim!)).then(() => written.push(claim!.subscriptionId))));
    try {
      await vi.waitFor(() => expect(written).toContain(free!.subscriptionId), { timeout: 5_000, interval: 50 });
      expect(written).not.toContain(blocked!.subscriptionId);
    } finally {
      await operator.query('ROLLBACK');
      operator.release();
    }
    await settling;
    expect(written.toSorted()).toEqual([first, blocked, free].map((claim) => claim!.subscriptionId).toSorted());
    expect((await settledEvents()).map((event) => event.status)).toEqual(['delivered', 'delivered', 'delivered']);
    expect([...(await streams()).values()].map((stream) => stream.claimed_by)).toEqual([null, null, null]);
  });
});

describe('settleClaims', () => {
  it('refuses two settlements of one subscription in one statement, writing nothing', async () => {
    const [claim] = await claimedSubscriptions(1, 2);
    await expect(settleClaims(database.db, [delivered(claim!, claim!.events.slice(0, 1)), delivered(claim!, claim!.events.slice(1))])).rejects.toThrow(
      /at most one settlement per subscription/,
    );
    expect((await settledEvents()).map((event) => event.status)).toEqual(['pending', 'pending']);
  });
});
