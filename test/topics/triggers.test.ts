import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { compileCriteria } from '../../src/search/criteria.ts';
import type { TestResult } from '../../src/topics/compile.ts';
import { addTopics } from '../../src/topics/store.ts';
import { createTestDatabase, storeClassicSubscription, storeTopicSubscription, type TestDatabase } from '../support/database.ts';
import { matchesSearch } from '../support/search-oracle.ts';

/**
 * The notification trigger of topic-based subscriptions
 * (db/functions/webhook.record_topic_events.sql): previous and current
 * criteria decided in SQL in the writing transaction, judged against the
 * search oracle the search tests use, for single-row and bulk statements.
 */

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database.drop());
beforeEach(async () => {
  await database.pool.query('DELETE FROM webhook.subscriptions');
  await database.pool.query('DELETE FROM webhook.subscription_topics');
  await database.pool.query('DELETE FROM webhook.subscription_events');
  await database.pool.query('DELETE FROM fhir.resources');
  await database.pool.query('DELETE FROM fhir.resource_history');
});

type Trigger = {
  interactions: ('create' | 'update' | 'delete')[];
  previous?: string;
  current?: string;
  resultForCreate?: TestResult;
  resultForDelete?: TestResult;
  requireBoth?: boolean;
};

let topicCount = 0;
/** A topic with one Encounter trigger, stored, and an active subscription on it (as the API will store one); its id. */
async function subscribeToTopic(trigger: Trigger, filter?: string): Promise<string> {
  const url = `http://example.org/topics/t${++topicCount}`;
  await addTopics(database.db, [
    {
      resourceType: 'SubscriptionTopic',
      url,
      status: 'active',
      resourceTrigger: [
        {
          resource: 'Encounter',
          supportedInteraction: trigger.interactions,
          queryCriteria: {
            previous: trigger.previous,
            current: trigger.current,
            resultForCreate: trigger.resultForCreate,
            resultForDelete: trigger.resultForDelete,
            requireBoth: trigger.requireBoth,
          },
        },
      ],
    },
  ]);
  const topicFilter = filter === undefined ? null : JSON.stringify({ Encounter: compileCriteria(`Encounter?${filter}`).match });
  return storeTopicSubscription(database.pool, url, topicFilter);
}

const encounter = (id: string, status: string, patient = 'Patient/1') => ({
  resourceType: 'Encounter',
  id,
  status,
  class: { code: 'AMB' },
  subject: { reference: patient },
});

/** The events recorded for a subscription: [id, version, deleted]. */
async function events(subscriptionId: string): Promise<[string, number, boolean][]> {
  const { rows } = await database.pool.query<{ resource_id: string; version_id: number; deleted: boolean }>(
    `SELECT resource_id, version_id, deleted FROM webhook.subscription_events WHERE subscription_id = $1 ORDER BY id`,
    [subscriptionId],
  );
  return rows.map((row) => [row.resource_id, row.version_id, row.deleted]);
}

const became = {
  interactions: ['create', 'update'],
  previous: 'status:not=finished',
  resultForCreate: 'test-passes',
  current: 'status=finished',
  requireBoth: true,
} satisfies Trigger;

describe('a topic whose trigger is "became finished"', () => {
  it('fires on a create that is finished, an update into finished, and on nothing else', async () => {
    const subscription = await subscribeToTopic(became);
    const write = (sql: string, ...values: unknown[]) => database.pool.query(sql, values);
    await write(`INSERT INTO fhir.resources (content) VALUES ($1)`, encounter('born-finished', 'finished'));
    await write(`INSERT INTO fhir.resources (content) VALUES ($1)`, encounter('e1', 'in-progress'));
    await write(`UPDATE fhir.resources SET content = content || '{"status":"finished"}' WHERE id = 'e1'`);
    // Finished already: a change within the state does not fire, nor does leaving it.
    await write(`UPDATE fhir.resources SET content = content || '{"period":{"end":"2026-11-24"}}' WHERE id = 'e1'`);
    await write(`UPDATE fhir.resources SET content = content || '{"status":"cancelled"}' WHERE id = 'e1'`);
    // Delete is not among its interactions.
    await write(`DELETE FROM fhir.resources WHERE id = 'born-finished'`);
    expect(await events(subscription)).toEqual([
      ['born-finished', 1, false],
      ['e1', 2, false],
    ]);
  });

  it("fires, for a loader's UPDATE of many rows, on exactly the rows that changed into the state", async () => {
    const subscription = await subscribeToTopic(became);
    await database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Encounter', 'id', 'bulk-' || n, 'status', CASE WHEN n % 3 = 0 THEN 'finished' ELSE 'in-progress' END, 'class', jsonb_build_object('code', 'AMB'))
       FROM generate_series(1, 3000) n`,
    );
    const created = (await events(subscription)).length;
    await database.pool.query(`UPDATE fhir.resources SET content = content || '{"status":"finished"}' WHERE resource_type = 'Encounter'`);
    const updated = (await events(subscription)).slice(created);
    expect(created).toBe(1000);
    expect(updated).toHaveLength(2000);
    expect(updated.every(([id, version]) => Number(id.slice('bulk-'.length)) % 3 !== 0 && version === 2)).toBe(true);
  });

  it('notifies only resources passing the subscription’s filter', async () => {
    const mine = await subscribeToTopic(became, 'subject=Patient/7');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2)`, [
      encounter('of-7', 'finished', 'Patient/7'),
      encounter('of-8', 'finished', 'Patient/8'),
    ]);
    expect(await events(mine)).toEqual([['of-7', 1, false]]);
  });

  it('records nothing for a write that rolls back', async () => {
    const subscription = await subscribeToTopic(became);
    const client = await database.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [encounter('rolled-back', 'finished')]);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await events(subscription)).toEqual([]);
  });

  it('leaves classic subscriptions to their own trigger, and is not matched by it', async () => {
    const topicBased = await subscribeToTopic(became);
    const classic = await storeClassicSubscription(database.pool, 'Encounter?status=finished');
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [encounter('both', 'finished')]);
    await database.pool.query(`UPDATE fhir.resources SET content = content || '{"period":{"end":"2026-11-24"}}' WHERE id = 'both'`);
    // The classic criteria matches a state (both versions); the topic a change (the first).
    expect(await events(classic)).toEqual([
      ['both', 1, false],
      ['both', 2, false],
    ]);
    expect(await events(topicBased)).toEqual([['both', 1, false]]);
  });
});

describe('previous and current, against the search oracle', () => {
  // Deterministic: a seeded sequence of writes, printed with its seed on failure.
  const seed = 20261124;
  const statuses = ['planned', 'arrived', 'in-progress', 'finished', 'cancelled'];

  const variants: Trigger[] = [
    became,
    { ...became, resultForCreate: 'test-fails' },
    { ...became, requireBoth: false },
    { interactions: ['update', 'delete'], previous: 'status=finished', current: 'status:not=finished', resultForDelete: 'test-passes', requireBoth: true },
    {
      interactions: ['create', 'update', 'delete'],
      previous: 'status=in-progress',
      resultForCreate: 'test-fails',
      current: 'status=finished,cancelled',
      resultForDelete: 'test-fails',
      requireBoth: false,
    },
    { interactions: ['delete'], current: 'status=finished', resultForDelete: 'test-passes' },
    { interactions: ['create', 'update'], current: 'status=arrived' },
    { interactions: ['update'] },
  ];

  /** The oracle's decision for one write, independent of the SQL. */
  function fires(trigger: Trigger, interaction: 'create' | 'update' | 'delete', previous: object | undefined, current: object | undefined): boolean {
    if (!trigger.interactions.includes(interaction)) return false;
    const test = (criteria: string | undefined, version: object | undefined, result: TestResult | undefined) =>
      criteria === undefined ? undefined : version === undefined ? result === 'test-passes' : matchesSearch(version, 'Encounter', criteria);
    const results = [test(trigger.previous, previous, trigger.resultForCreate), test(trigger.current, current, trigger.resultForDelete)].filter(
      (result) => result !== undefined,
    );
    if (results.length === 0) return true;
    return trigger.requireBoth === true ? results.every(Boolean) : results.some(Boolean);
  }

  it('record, for every variation, exactly the writes the oracle says fire, single-row and bulk', async () => {
    let state = seed;
    const random = (n: number) => {
      state = (state * 1103515245 + 12345) % 2 ** 31;
      return Math.floor(state / 65_536) % n;
    };
    const subscriptions = await Promise.all(variants.map((trigger) => subscribeToTopic(trigger)));
    const expected = new Map<string, [string, number, boolean][]>(subscriptions.map((id) => [id, []]));
    const stored = new Map<string, { content: object; version: number }>();
    const deletedVersions = new Map<string, number>();
    const note = (interaction: 'create' | 'update' | 'delete', id: string, previous: object | undefined, current: object | undefined, version: number) => {
      for (const [index, trigger] of variants.entries()) {
        if (fires(trigger, interaction, previous, current)) expected.get(subscriptions[index]!)!.push([id, version, interaction === 'delete']);
      }
    };
    const log: string[] = [];
    for (let round = 0; round < 60; round += 1) {
      // Each round is one statement over up to 4 resources of ten: creates, updates or deletes.
      const kind = random(3);
      const ids = [...new Set(Array.from({ length: 1 + random(4) }, () => `r${random(10)}`))].sort();
      if (kind === 0) {
        const fresh = ids.filter((id) => !stored.has(id));
        if (fresh.length === 0) continue;
        const rows = fresh.map((id) => encounter(id, statuses[random(statuses.length)]!));
        await database.pool.query(`INSERT INTO fhir.resources (content) SELECT * FROM jsonb_array_elements($1::jsonb)`, [JSON.stringify(rows)]);
        for (const row of rows) {
          const version = (deletedVersions.get(row.id) ?? 0) + 1;
          note('create', row.id, undefined, row, version);
          stored.set(row.id, { content: row, version });
        }
        log.push(`create ${rows.map((row) => `${row.id}:${row.status}`).join(' ')}`);
      } else if (kind === 1) {
        const existing = ids.filter((id) => stored.has(id));
        if (existing.length === 0) continue;
        const status = statuses[random(statuses.length)]!;
        await database.pool.query(
          `UPDATE fhir.resources SET content = content || jsonb_build_object('status', $1::text) WHERE resource_type = 'Encounter' AND id = ANY($2)`,
          [status, existing],
        );
        for (const id of existing) {
          const before = stored.get(id)!;
          const after = { ...before.content, status };
          note('update', id, before.content, after, before.version + 1);
          stored.set(id, { content: after, version: before.version + 1 });
        }
        log.push(`update ${existing.join(' ')} to ${status}`);
      } else {
        const existing = ids.filter((id) => stored.has(id));
        if (existing.length === 0) continue;
        await database.pool.query(`DELETE FROM fhir.resources WHERE resource_type = 'Encounter' AND id = ANY($1)`, [existing]);
        for (const id of existing) {
          const before = stored.get(id)!;
          note('delete', id, before.content, undefined, before.version + 1);
          stored.delete(id);
          deletedVersions.set(id, before.version + 1);
        }
        log.push(`delete ${existing.join(' ')}`);
      }
    }
    const sortEvents = (list: [string, number, boolean][]) => [...list].sort((a, b) => (a[0] === b[0] ? a[1] - b[1] : a[0] < b[0] ? -1 : 1));
    for (const [index, id] of subscriptions.entries()) {
      const context = `seed ${seed}, variant ${index} ${JSON.stringify(variants[index])}; writes:\n${log.join('\n')}`;
      expect(sortEvents(await events(id)), context).toEqual(sortEvents(expected.get(id)!));
    }
    // The sequence exercised every interaction and every variant fired at least once.
    expect(log.some((line) => line.startsWith('delete')) && log.some((line) => line.startsWith('update'))).toBe(true);
    for (const [index, id] of subscriptions.entries()) expect((await events(id)).length, `variant ${index} never fired`).toBeGreaterThan(0);
  });
});
