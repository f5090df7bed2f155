import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { claimEvents, claimNextBatch, type ClaimedEvent } from '../../src/db/sql/claim-subscription-events.ts';
import { settleClaim } from '../../src/dispatch/events/log.ts';
import { type TestApp } from '../support/app.ts';
import { eventNumbers } from '../support/backport-conformance.ts';
import { createTestDatabase, storeClassicSubscription, type TestDatabase } from '../support/database.ts';
import type { Receiver } from '../support/receiver.ts';
import { untilDelivered, untilStatus } from '../support/subscriptions.ts';
import { backportIg, exampleTopicUrl, startTopicStack, type TopicStack } from '../support/topics.ts';

/**
 * Claims bounded by bytes as well as events (issue 26, item 7): a worker
 * process's batches hold at most DELIVERY_MAX_CLAIMED_BYTES of resource
 * versions, each counted at its size uncompressed (about its JSON text), so
 * that a subscription of large resources cannot fill its heap. The resources
 * here are 150 to 300 kB each (a narrative that PostgreSQL compresses 50
 * times and more: counted at their stored size, they would all fit), written
 * in one SQL statement, as a batch loader writes them.
 */

/** `count` Patients of the family, 150 to 300 kB each, in one SQL statement (a loader's): an event each for a subscription on the family. */
async function writeLargePatients(pool: TestDatabase['pool'], family: string, count: number): Promise<void> {
  await pool.query(
    `INSERT INTO fhir.resources (content)
     SELECT jsonb_build_object('resourceType', 'Patient', 'id', $1 || '-' || n, 'name', jsonb_build_array(jsonb_build_object('family', $1)),
                               'text', jsonb_build_object('status', 'generated',
                                                          'div', '<div xmlns="http://www.w3.org/1999/xhtml">' || repeat('Seen on visit ' || n || '. ', size.kb * 1000 / 16) || '</div>'))
     FROM generate_series(1, $2::int) n
     CROSS JOIN LATERAL (SELECT 150 + (n * 53) % 151 AS kb) size`,
    [family, count],
  );
}

describe('the claim functions, bounded by bytes', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase();
    await database.pool.query(`INSERT INTO webhook.worker_pools (pool_id, host, process_id, kind) VALUES ('sender-a', 'test', 1, 'event-sender')`);
  });
  afterAll(() => database.drop());
  beforeEach(async () => {
    await database.pool.query('DELETE FROM webhook.subscriptions');
    await database.pool.query('DELETE FROM webhook.subscription_events');
    await database.pool.query('DELETE FROM fhir.resources');
    await database.pool.query('DELETE FROM fhir.resource_history');
    await database.pool.query(`UPDATE webhook.worker_pools SET last_seen = now()`);
  });

  /** An active classic subscription, stored as the API would store it (the claims do not read its secrets). */
  const subscribe = (criteria: string) => storeClassicSubscription(database.pool, criteria);

  /** Each version's size as its JSON text and as PostgreSQL stores it, by resource id. */
  async function sizes(): Promise<Map<string, { text: number; stored: number }>> {
    const { rows } = await database.pool.query<{ id: string; text: number; stored: number }>(
      `SELECT id, octet_length(content::text) AS text, pg_column_size(content) AS stored FROM fhir.resource_history`,
    );
    return new Map(rows.map((row) => [row.id, { text: row.text, stored: row.stored }]));
  }

  const delivered = (senderId: string, subscriptionId: string, events: ClaimedEvent[], keepClaim: boolean) =>
    settleClaim(
      database.db,
      { senderId, subscriptionId },
      events.map((event) => ({ eventId: event.eventId, status: 'delivered', attempts: 1, notBefore: null })),
      [],
      { resetFailureCount: true, keepClaim },
    );

  it('release at once a subscription every event of whose claim was set aside (a retry of a version older than one already sent)', async () => {
    const id = await subscribe('Patient?family=overtaken');
    await database.pool.query(
      `INSERT INTO fhir.resources (content) VALUES ('{"resourceType": "Patient", "id": "overtaken", "name": [{"family": "overtaken"}]}')`,
    );
    await database.pool.query(`UPDATE fhir.resources SET content = jsonb_set(content, '{active}', 'true') WHERE id = 'overtaken'`);
    // Version 2 was sent while version 1 waited for its retry, now due.
    await database.pool.query(
      `UPDATE webhook.subscription_events SET status = 'delivered', settled_at = now(), attempts = 1, event_number = 1 WHERE subscription_id = $1 AND version_id = 2`,
      [id],
    );
    await database.pool.query(
      `INSERT INTO webhook.delivery_attempts (subscription_id, kind, resource_type, resource_id, version_id, event_number, attempt, started_at, duration_ms, http_status, outcome)
       VALUES ($1, 'notification', 'Patient', 'overtaken', 2, 1, 1, now(), 1, 200, 'delivered')`,
      [id],
    );
    await database.pool.query(`UPDATE webhook.subscription_streams SET last_event_number = 1 WHERE subscription_id = $1`, [id]);
    await database.pool.query(
      `UPDATE webhook.subscription_events SET attempts = 1, not_before = now() - interval '1 second' WHERE subscription_id = $1 AND version_id = 1`,
      [id],
    );

    expect(await claimEvents(database.db, 'sender-a', 10)).toEqual([]);
    const { rows } = await database.pool.query(
      `SELECT (SELECT claim.claimed_by FROM webhook.subscription_claims claim WHERE claim.subscription_id = stream.subscription_id) AS claimed_by, event.status FROM webhook.subscription_streams stream
       JOIN webhook.subscription_events event ON event.subscription_id = stream.subscription_id AND event.version_id = 1
       WHERE stream.subscription_id = $1`,
      [id],
    );
    // Not left claimed by a sender that never heard of it, until the sweep of stranded claims 10 s later.
    expect(rows).toEqual([{ claimed_by: null, status: 'superseded' }]);
  });

  it('take events in log order while their versions fit, counted uncompressed; the rest come in the next batches, in order, once each', async () => {
    const maxBytes = 600_000;
    const count = 20;
    const id = await subscribe('Patient?family=Large');
    await writeLargePatients(database.pool, 'Large', count);
    const versions = await sizes();
    const { rows: logged } = await database.pool.query<{ resource_id: string }>(`SELECT resource_id FROM webhook.subscription_events ORDER BY id`);
    const logOrder = logged.map((row) => row.resource_id);
    // The narrative compresses: stored, every version would fit in a claim many times over.
    expect([...versions.values()].every((size) => size.stored * 20 < size.text && size.text >= 150_000)).toBe(true);

    const [claim, ...others] = await claimEvents(database.db, 'sender-a', 10, maxBytes);
    expect(others).toEqual([]);
    const batches = [claim!];
    while (batches.at(-1)!.moreDue) {
      const before = batches.at(-1)!;
      await delivered('sender-a', id, before.events, true);
      const next = await claimNextBatch(database.db, 'sender-a', id, before.events.at(-1)!.eventId, maxBytes);
      expect(next).toBeDefined();
      batches.push(next!);
    }
    await delivered('sender-a', id, batches.at(-1)!.events, false);

    for (const [index, batch] of batches.entries()) {
      // What each event was counted for is its version's size uncompressed: within 2% of its JSON text.
      for (const event of batch.events)
        expect(Math.abs(event.bytes - versions.get(event.resourceId)!.text)).toBeLessThan(versions.get(event.resourceId)!.text * 0.02);
      expect(batch.bytes).toBe(batch.events.reduce((sum, event) => sum + event.bytes, 0));
      expect(batch.bytes).toBeLessThanOrEqual(maxBytes);
      // Each batch but the last ended where the next event would not fit: more than one 150-300 kB version, less than 600 kB.
      if (index < batches.length - 1)
        expect(batch.bytes + versions.get(logOrder[logOrder.indexOf(batch.events.at(-1)!.resourceId) + 1]!)!.text).toBeGreaterThan(maxBytes);
    }
    expect(batches.length).toBeGreaterThan(4);
    const sent = batches.flatMap((batch) => batch.events);
    expect(sent.map((event) => event.resourceId)).toEqual(logOrder);
    expect(logOrder).toHaveLength(count);
    expect(sent.map((event) => event.eventNumber)).toEqual(Array.from({ length: count }, (_, n) => n + 1));
    const { rows } = await database.pool.query(`SELECT status, count(*)::int FROM webhook.subscription_events GROUP BY status`);
    expect(rows).toEqual([{ status: 'delivered', count }]);
  });

  it('take one event whatever its size when a claim would otherwise be empty; a next batch takes none past the bound', async () => {
    const id = await subscribe('Patient?family=Over');
    await writeLargePatients(database.pool, 'Over', 3);
    // No bytes at all: still one event.
    const [claim] = await claimEvents(database.db, 'sender-a', 10, 0);
    expect(claim!.events.map((event) => event.resourceId)).toEqual(['Over-1']);
    expect(claim!.bytes).toBeGreaterThan(150_000);
    expect(claim!.moreDue).toBe(true);
    // The batch in flight is the progress: the next one waits rather than go past the bound.
    expect(await claimNextBatch(database.db, 'sender-a', id, claim!.events[0]!.eventId, 1_000)).toBeUndefined();
    await delivered('sender-a', id, claim!.events, false);
    const [next] = await claimEvents(database.db, 'sender-a', 10, 1_000);
    expect(next!.events.map((event) => [event.resourceId, event.eventNumber])).toEqual([['Over-2', 2]]);
  });

  it('end a claim of several subscriptions at the first none of whose events fits, which is first in line for the next claim', async () => {
    const first = await subscribe('Patient?family=First');
    const second = await subscribe('Patient?family=Second');
    const third = await subscribe('Patient?family=Third');
    await writeLargePatients(database.pool, 'First', 2);
    await writeLargePatients(database.pool, 'Second', 2);
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ('{"resourceType": "Patient", "name": [{"family": "Third"}]}')`);
    const versions = await sizes();
    const firstBytes = versions.get('First-1')!.text + versions.get('First-2')!.text;
    // Room for First's two and less than Second's first: Third's small event, behind it, waits too.
    const claims = await claimEvents(database.db, 'sender-a', 10, firstBytes + 100_000);
    expect(claims.map((claim) => [claim.subscriptionId, claim.events.length, claim.moreDue])).toEqual([[first, 2, false]]);
    const { rows } = await database.pool.query(
      `SELECT subscription_id, (SELECT claim.claimed_by FROM webhook.subscription_claims claim WHERE claim.subscription_id = stream.subscription_id) AS claimed_by
       FROM webhook.subscription_streams stream WHERE subscription_id IN ($1, $2)`,
      [second, third],
    );
    expect(rows).toEqual(
      expect.arrayContaining([
        { subscription_id: second, claimed_by: null },
        { subscription_id: third, claimed_by: null },
      ]),
    );
    const next = await claimEvents(database.db, 'sender-a', 10, 1_000);
    expect(next.map((claim) => [claim.subscriptionId, claim.events.map((event) => event.resourceId)])).toEqual([[second, ['Second-1']]]);
  });
});

describe('a worker with DELIVERY_MAX_CLAIMED_BYTES', () => {
  const maxClaimedBytes = 600_000;
  const events = 24;
  const topicUrl = exampleTopicUrl;
  const ig = backportIg;
  let t: TestApp;
  let stack: TopicStack;

  beforeAll(async () => {
    stack = await startTopicStack({ DELIVERY_MAX_CLAIMED_BYTES: String(maxClaimedBytes) });
    t = stack.t;
  });
  afterAll(() => stack?.close());

  /**
   * A receiver answering each call after 80 to 120 ms, that keeps the most bytes of bodies it held at once. Long enough that a
   * batch's calls overlap at the receiver even on a loaded machine, where a large body's next call can take tens of ms to arrive.
   */
  async function slowReceiver(): Promise<Receiver & { mostBytesAtOnce: () => number; mostCallsAtOnce: () => number }> {
    const receiver = await stack.receiver();
    let bytes = 0;
    let calls = 0;
    let mostBytes = 0;
    let mostCalls = 0;
    receiver.answer = (call) => {
      const delayMs = 80 + Math.floor(Math.random() * 41);
      bytes += call.body.length;
      calls += 1;
      mostBytes = Math.max(mostBytes, bytes);
      mostCalls = Math.max(mostCalls, calls);
      // Set before the receiver's own timer of the same delay, so it runs first: a call is held until its answer is written.
      setTimeout(() => {
        bytes -= call.body.length;
        calls -= 1;
      }, delayMs);
      return { status: 200, delayMs };
    };
    return Object.assign(receiver, { mostBytesAtOnce: () => mostBytes, mostCallsAtOnce: () => mostCalls });
  }

  async function activeSubscription(body: unknown): Promise<string> {
    const response = await t.fhir('POST', '/Subscription', body);
    expect(response.statusCode, response.body).toBe(201);
    const { id } = response.json<{ id: string }>();
    await untilStatus(t, id, 'active');
    return id;
  }

  const untilAllDelivered = (id: string, count: number) => untilDelivered(t, id, count, 30_000);

  it(`sends a classic subscription's ${events} large resources once each, its calls in flight never holding more than the bound`, async () => {
    const receiver = await slowReceiver();
    const id = await activeSubscription({
      resourceType: 'Subscription',
      status: 'requested',
      reason: 'large resources',
      criteria: 'Patient?family=Classic',
      channel: { type: 'rest-hook', endpoint: receiver.url, payload: 'application/fhir+json', header: ['secret: bytes-secret'] },
    });
    await writeLargePatients(t.database.pool, 'Classic', events);
    await untilAllDelivered(id, events);
    const notifications = receiver.calls.slice(1).map((call) => call.json.id);
    expect(notifications.toSorted()).toEqual(Array.from({ length: events }, (_, n) => `Classic-${n + 1}`).toSorted());
    // Its calls go out several at a time (DELIVERY_PARALLEL_CALLS, 8), but only within one batch, and a batch within the bound:
    // 8 calls of these resources would hold 1.2 MB or more.
    expect(receiver.mostCallsAtOnce()).toBeGreaterThan(1);
    expect(receiver.mostBytesAtOnce()).toBeLessThanOrEqual(maxClaimedBytes);
  });

  it(`sends a topic-based subscription's ${events} large resources once each, in event-number order`, async () => {
    const receiver = await slowReceiver();
    const id = await activeSubscription({
      resourceType: 'Subscription',
      status: 'requested',
      reason: 'large resources',
      criteria: topicUrl,
      _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: 'Encounter?patient=Patient/large' }] },
      channel: {
        type: 'rest-hook',
        endpoint: receiver.url,
        payload: 'application/fhir+json',
        _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'full-resource' }] },
        header: ['secret: bytes-secret'],
      },
    });
    await t.database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Encounter', 'id', 'large-' || n, 'status', 'finished', 'class', jsonb_build_object('code', 'AMB'),
                                 'subject', jsonb_build_object('reference', 'Patient/large'),
                                 'text', jsonb_build_object('status', 'generated',
                                                            'div', '<div xmlns="http://www.w3.org/1999/xhtml">' || repeat('Encounter ' || n || '. ', (150 + (n * 53) % 151) * 1000 / 14) || '</div>'))
       FROM generate_series(1, $1::int) n`,
      [events],
    );
    await untilAllDelivered(id, events);
    const arrivals = receiver.calls.flatMap((call) => eventNumbers(call.json));
    expect(arrivals).toEqual(Array.from({ length: events }, (_, n) => n + 1));
    expect(receiver.mostBytesAtOnce()).toBeLessThanOrEqual(maxClaimedBytes);
  });

  it('sends a version larger than the bound, alone', async () => {
    const receiver = await slowReceiver();
    const id = await activeSubscription({
      resourceType: 'Subscription',
      status: 'requested',
      reason: 'a resource over the bound',
      criteria: 'Patient?family=Huge',
      channel: { type: 'rest-hook', endpoint: receiver.url, payload: 'application/fhir+json', header: ['secret: bytes-secret'] },
    });
    await t.database.pool.query(
      `INSERT INTO fhir.resources (content)
       VALUES (jsonb_build_object('resourceType', 'Patient', 'id', 'huge', 'name', jsonb_build_array(jsonb_build_object('family', 'Huge')),
                                  'text', jsonb_build_object('status', 'generated', 'div', '<div xmlns="http://www.w3.org/1999/xhtml">' || repeat('A long story. ', 64000) || '</div>')))`,
    );
    await untilAllDelivered(id, 1);
    const [, notification] = receiver.calls;
    expect(notification!.json.id).toBe('huge');
    expect(notification!.body.length).toBeGreaterThan(maxClaimedBytes);
  });
});
