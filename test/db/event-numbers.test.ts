import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimEvents } from '../../src/db/sql/claim-subscription-events.ts';
import { settleClaim } from '../../src/dispatch/events/log.ts';
import { createTestDatabase, storeClassicSubscription, type TestDatabase } from '../support/database.ts';

// Event numbers are read from the log (db/functions/webhook.last_event_number.sql), not counted in the subscription's
// row of webhook.subscription_streams (issue 35, item 5): while a snapshot is held (a DBA's long report), no version
// of a row can be pruned, and a lookup by key walks them all; with that row written at every claim (claimed,
// numbered, released), a 40-minute soak on the embedded 18.4 went from a p99 of 44 ms to 306 ms (docs/performance.md).

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
  await database.pool.query(`INSERT INTO webhook.worker_pools (pool_id, host, process_id, kind) VALUES ('sender-a', 'test', 1, 'event-sender')`);
});
afterAll(() => database.drop());

/** Writes `count` booked appointments (ids prefixed by `prefix`), then claims and settles them as delivered: their numbers. */
async function deliverAppointments(subscription: string, prefix: string, count: number): Promise<number[]> {
  await database.pool.query(
    `INSERT INTO fhir.resources (content)
     SELECT jsonb_build_object('resourceType', 'Appointment', 'id', $1::text || n, 'status', 'booked', 'participant', '[]'::jsonb)
     FROM generate_series(1, $2::int) n`,
    [prefix, count],
  );
  const [claim] = await claimEvents(database.db, 'sender-a', 1);
  expect(claim?.subscriptionId).toBe(subscription);
  const outcomes = claim!.events.map((event) => ({ eventId: event.eventId, status: 'delivered' as const, attempts: 1, notBefore: null }));
  await settleClaim(database.db, { senderId: 'sender-a', subscriptionId: subscription }, outcomes, [], { resetFailureCount: false });
  return claim!.events.map((event) => event.eventNumber);
}

describe('event numbers', () => {
  it('go on from the last given after the numbered events leave the log, deleted by retention or truncated', async () => {
    await database.pool.query('DELETE FROM webhook.subscriptions');
    const subscription = await storeClassicSubscription(database.pool, 'Appointment?status=booked');
    expect(await deliverAppointments(subscription, 'first-', 3)).toEqual([1, 2, 3]);
    // Retention's cleanup deletes the settled events, the newest numbered one among them.
    await database.pool.query(`DELETE FROM webhook.subscription_events WHERE status <> 'pending'`);
    expect(await deliverAppointments(subscription, 'second-', 2)).toEqual([4, 5]);
    // Deleting older events only leaves the floor as it is.
    await database.pool.query(`DELETE FROM webhook.subscription_events WHERE event_number = 4`);
    expect(await deliverAppointments(subscription, 'third-', 1)).toEqual([6]);
    await database.pool.query('TRUNCATE webhook.subscription_events');
    expect(await deliverAppointments(subscription, 'fourth-', 2)).toEqual([7, 8]);
    const { rows } = await database.pool.query<{ last: string; floor: string }>(
      `SELECT webhook.last_event_number($1) AS last, last_event_number AS floor FROM webhook.subscription_streams WHERE subscription_id = $1`,
      [subscription],
    );
    expect(rows[0]).toEqual({ last: '8', floor: '6' });
  });
});

describe('a claim', () => {
  it("numbers its events gaplessly without writing the count into the subscription's stream row", async () => {
    await database.pool.query('DELETE FROM webhook.subscriptions');
    const subscription = await storeClassicSubscription(database.pool, 'Appointment?status=booked');
    const numbers: number[] = [];
    for (let round = 0; round < 10; round++) numbers.push(...(await deliverAppointments(subscription, `round-${round}-`, 3)));
    expect(numbers).toEqual(Array.from({ length: 30 }, (_, n) => n + 1));
    const { rows } = await database.pool.query<{ last: string; floor: string }>(
      `SELECT webhook.last_event_number($1) AS last, last_event_number AS floor FROM webhook.subscription_streams WHERE subscription_id = $1`,
      [subscription],
    );
    expect(rows[0]).toEqual({ last: '30', floor: '0' });
  });
});
