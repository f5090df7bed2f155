import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { TopicRefused } from '../../src/topics/definition.ts';
import { addTopics } from '../../src/topics/store.ts';
import { childEnvironment, runCommand } from '../support/commands.ts';
import { createTestDatabase, storeTopicSubscription, type TestDatabase } from '../support/database.ts';
import { fhirpathFires, type Version } from '../support/fhirpath-oracle.ts';

/**
 * Topics whose trigger is a fhirPathCriteria: compiled to SQL (src/fhirpath/)
 * and decided by the notification trigger
 * (db/functions/webhook.record_topic_events.sql) in the writing transaction,
 * for single-row and bulk statements, judged against fhirpath.js.
 */

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database.drop());
beforeEach(async () => {
  for (const table of ['webhook.subscriptions', 'webhook.subscription_topics', 'webhook.subscription_events', 'fhir.resources', 'fhir.resource_history']) {
    await database.pool.query(`DELETE FROM ${table}`);
  }
});

type Interaction = 'create' | 'update' | 'delete';
type Trigger = { interactions: Interaction[]; fhirPathCriteria: string; queryCriteria?: { current: string } };

let topicCount = 0;
/** A topic with one Encounter trigger, stored, and an active subscription on it; the subscription's id. */
async function subscribeToTopic(trigger: Trigger): Promise<string> {
  const url = `http://example.org/topics/fhirpath-${++topicCount}`;
  await addTopics(database.db, [
    {
      resourceType: 'SubscriptionTopic',
      url,
      status: 'active',
      resourceTrigger: [
        { resource: 'Encounter', supportedInteraction: trigger.interactions, fhirPathCriteria: trigger.fhirPathCriteria, queryCriteria: trigger.queryCriteria },
      ],
    },
  ]);
  return subscribe(url);
}

/** An active subscription on the topic at `url`, as the API stores one after its handshake; its id. */
const subscribe = (url: string) => storeTopicSubscription(database.pool, url);

const encounter = (id: string, status: string, classCode = 'AMB') => ({ resourceType: 'Encounter', id, status, class: { code: classCode } });

async function events(subscriptionId: string): Promise<[string, number, boolean][]> {
  const { rows } = await database.pool.query<{ resource_id: string; version_id: number; deleted: boolean }>(
    `SELECT resource_id, version_id, deleted FROM webhook.subscription_events WHERE subscription_id = $1 ORDER BY id`,
    [subscriptionId],
  );
  return rows.map((row) => [row.resource_id, row.version_id, row.deleted]);
}

const write = (sql: string, ...values: unknown[]) => database.pool.query(sql, values);

// Aidbox's way of saying "became finished": FHIRPath only.
const becameFinished = "%current.status = 'finished' and %previous.status != 'finished'";

describe('a topic whose trigger is a FHIRPath criteria', () => {
  it('fires on an update into the state and on nothing else, %previous empty on a create', async () => {
    const subscription = await subscribeToTopic({ interactions: ['create', 'update', 'delete'], fhirPathCriteria: becameFinished });
    // A create has no previous version: `%previous.status != 'finished'` is empty, so the criteria is not true.
    await write(`INSERT INTO fhir.resources (content) VALUES ($1)`, encounter('born-finished', 'finished'));
    await write(`INSERT INTO fhir.resources (content) VALUES ($1)`, encounter('e1', 'in-progress'));
    await write(`UPDATE fhir.resources SET content = content || '{"status":"finished"}' WHERE id = 'e1'`);
    await write(`UPDATE fhir.resources SET content = content || '{"period":{"end":"2026-11-28"}}' WHERE id = 'e1'`);
    await write(`DELETE FROM fhir.resources WHERE id = 'e1'`);
    expect(await events(subscription)).toEqual([['e1', 2, false]]);
  });

  it('sees the version before a delete as %previous, and none as %current', async () => {
    const subscription = await subscribeToTopic({ interactions: ['delete'], fhirPathCriteria: "%previous.status = 'finished' and %current.empty()" });
    await write(`INSERT INTO fhir.resources (content) VALUES ($1), ($2)`, encounter('done', 'finished'), encounter('open', 'in-progress'));
    await write(`DELETE FROM fhir.resources WHERE id IN ('done', 'open')`);
    expect(await events(subscription)).toEqual([['done', 2, true]]);
  });

  it('must hold together with the queryCriteria when both are given', async () => {
    const subscription = await subscribeToTopic({
      interactions: ['create'],
      queryCriteria: { current: 'status=finished' },
      fhirPathCriteria: "%current.class.code = 'EMER'",
    });
    await write(
      `INSERT INTO fhir.resources (content) VALUES ($1), ($2), ($3)`,
      encounter('finished-emer', 'finished', 'EMER'),
      encounter('finished-amb', 'finished', 'AMB'),
      encounter('planned-emer', 'planned', 'EMER'),
    );
    expect(await events(subscription)).toEqual([['finished-emer', 1, false]]);
  });

  it("fires, for a loader's UPDATE of many rows, on exactly the rows that changed into the state", async () => {
    const subscription = await subscribeToTopic({ interactions: ['create', 'update'], fhirPathCriteria: becameFinished });
    await write(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Encounter', 'id', 'bulk-' || n, 'status', CASE WHEN n % 3 = 0 THEN 'finished' ELSE 'in-progress' END)
       FROM generate_series(1, 3000) n`,
    );
    await write(`UPDATE fhir.resources SET content = content || '{"status":"finished"}' WHERE resource_type = 'Encounter'`);
    const recorded = await events(subscription);
    expect(recorded).toHaveLength(2000);
    expect(recorded.every(([id, version]) => Number(id.slice('bulk-'.length)) % 3 !== 0 && version === 2)).toBe(true);
  });

  it("never fails a loader's write over a malformed value: a number or a Boolean that is not one compares as nothing", async () => {
    const subscription = await subscribeToTopic({
      interactions: ['create'],
      fhirPathCriteria: "%current.length.value > 2 or %current.class.code < 'B' or %current.type.text.first() > 'a'",
    });
    await write(
      `INSERT INTO fhir.resources (content) VALUES ($1), ($2)`,
      { ...encounter('malformed', 'finished'), class: { code: 7 }, length: { value: 'long' }, type: [{ text: false }] },
      { ...encounter('long', 'finished'), length: { value: 45 } },
    );
    expect(await events(subscription)).toEqual([['long', 1, false]]);
  });

  it("compares dates at the writing transaction's time, and never fails a loader's write over a date that is no day", async () => {
    const subscription = await subscribeToTopic({
      interactions: ['create', 'update'],
      fhirPathCriteria: '%current.period.end <= now() and (%previous.period.end.empty() or %previous.period.end > now())',
    });
    const ending = (id: string, end: string) => ({ ...encounter(id, 'in-progress'), period: { end } });
    const client = await database.pool.connect();
    try {
      await client.query('BEGIN');
      // The transaction's now() is before this second's: an end stamped later in it has not come yet.
      const { rows } = await client.query<{ now: string; later: string }>(
        `SELECT to_char(transaction_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS now,
                to_char((transaction_timestamp() + interval '1 second') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS later`,
      );
      await client.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2), ($3), ($4), ($5)`, [
        ending('ended-now', rows[0]!.now),
        ending('ends-later', rows[0]!.later),
        ending('ended-last-year', '2025-11-28'),
        ending('ended-this-month', rows[0]!.now.slice(0, 7)),
        ending('no-such-day', '2025-02-30'),
      ]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    // The month of now() is now()'s at the lesser precision: FHIRPath cannot order them, and the topic does not fire.
    expect((await events(subscription)).map(([id]) => id).sort()).toEqual(['ended-last-year', 'ended-now']);
  });

  it('takes topics added at once by two transactions: each one’s criteria is decided', async () => {
    const topic = (n: number) => ({
      resourceType: 'SubscriptionTopic',
      url: `http://example.org/topics/together-${n}`,
      status: 'active',
      resourceTrigger: [{ resource: 'Encounter', supportedInteraction: ['create'], fhirPathCriteria: `%current.class.code = 'C${n}'` }],
    });
    // Each adding transaction writes webhook.fhirpath_criteria_hold again; the second must see the first's criteria.
    await Promise.all([1, 2, 3, 4].map((n) => addTopics(database.db, [topic(n)])));
    const subscriptions = await Promise.all([1, 2, 3, 4].map((n) => subscribe(`http://example.org/topics/together-${n}`)));
    await write(
      `INSERT INTO fhir.resources (content) SELECT jsonb_build_object('resourceType', 'Encounter', 'id', 'c' || n, 'status', 'planned', 'class', jsonb_build_object('code', 'C' || n)) FROM generate_series(1, 4) n`,
    );
    for (const [index, subscription] of subscriptions.entries()) expect(await events(subscription)).toEqual([[`c${index + 1}`, 1, false]]);
  });

  it('records nothing for a write that rolls back', async () => {
    const subscription = await subscribeToTopic({ interactions: ['create'], fhirPathCriteria: "%current.status = 'finished'" });
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

  it('is refused when added, naming the construct and where it is', async () => {
    const adding = addTopics(database.db, [
      {
        resourceType: 'SubscriptionTopic',
        url: 'http://example.org/topics/refused',
        status: 'active',
        resourceTrigger: [{ resource: 'Encounter', fhirPathCriteria: "%current.status = 'finished' and %current.subject.resolve().exists()" }],
      },
    ]);
    await expect(adding).rejects.toThrow(TopicRefused);
    await expect(adding).rejects.toThrow('SubscriptionTopic.resourceTrigger[0].fhirPathCriteria: at line 1, column 51: resolve(): not supported');
  });
});

describe('npm run cli -- topics add, with a FHIRPath criteria', () => {
  it(
    'adds the example FHIRPath topic, which then fires on writes; refuses one outside the subset with exit 2, naming the construct',
    { timeout: 60_000 },
    async () => {
      const cli = (...args: string[]) =>
        runCommand('npm', ['run', '--silent', 'cli', '--', 'topics', ...args], childEnvironment({ DATABASE_URL: database.url }));
      const folder = await mkdtemp(path.join(tmpdir(), 'fhirpath-topics-'));
      const refusedFile = path.join(folder, 'refused.json');
      await writeFile(
        refusedFile,
        JSON.stringify({
          resourceType: 'SubscriptionTopic',
          url: 'http://example.org/topics/refused',
          status: 'active',
          resourceTrigger: [{ resource: 'Encounter', fhirPathCriteria: "%current.class.memberOf('http://example.org/vs').not()" }],
        }),
      );
      expect(await cli('add', refusedFile)).toEqual({
        exitCode: 2,
        output: `Refused ${refusedFile}, nothing added: SubscriptionTopic.resourceTrigger[0].fhirPathCriteria: at line 1, column 16: memberOf(): not supported\n`,
      });
      expect(await cli('add', 'examples/topics/encounter-complete-fhirpath.json')).toEqual({
        exitCode: 0,
        output: 'Added http://example.org/topics/encounter-complete-fhirpath|1.0.0\n',
      });
      // What the trigger evaluates, for a DBA to read: the expression and its SQL.
      const explained = await cli('explain', 'http://example.org/topics/encounter-complete-fhirpath');
      expect(explained.exitCode).toBe(0);
      expect(explained.output).toContain(
        "http://example.org/topics/encounter-complete-fhirpath|1.0.0 resourceTrigger[0]: Encounter, on create, update\n  fhirPathCriteria: %current.status = 'finished' and (%previous.empty() or %previous.status != 'finished')\n    SQL, over the versions previous and current (NULL where there is none):\n      coalesce(((nullif(current -> 'status', 'null') = '\"finished\"'::jsonb) AND ((previous IS NULL) OR (NOT (nullif(previous -> 'status', 'null') = '\"finished\"'::jsonb)))), false)",
      );
      expect(await cli('explain', 'http://example.org/topics/none')).toEqual({
        exitCode: 1,
        output: 'No topic is http://example.org/topics/none (topics list shows them).\n',
      });
      const subscription = await subscribe('http://example.org/topics/encounter-complete-fhirpath');
      await write(`INSERT INTO fhir.resources (content) VALUES ($1), ($2)`, encounter('born-finished', 'finished'), encounter('open', 'in-progress'));
      await write(`UPDATE fhir.resources SET content = content || '{"status":"finished"}' WHERE id = 'open'`);
      expect(await events(subscription)).toEqual([
        ['born-finished', 1, false],
        ['open', 2, false],
      ]);
    },
  );
});

describe('FHIRPath triggers against fhirpath.js', () => {
  const seed = Number(process.env.FHIRPATH_PROPERTY_SEED ?? '20261128');
  const criteria = [
    becameFinished,
    "%previous.status = 'in-progress' and %current.status in ('finished' | 'cancelled')",
    '%current.class.code != %previous.class.code',
    '%previous.exists() implies %previous.status != %current.status',
    "%current.class.code.startsWith('E') or %previous.class.code.startsWith('E')",
  ];
  const statuses = ['planned', 'in-progress', 'finished', 'cancelled'];
  const codes = ['AMB', 'EMER', 'IMP'];

  it('records, for each criteria, exactly the writes fhirpath.js says fire, single-row and bulk', { timeout: 60_000 }, async () => {
    const subscriptions = await Promise.all(
      criteria.map((fhirPathCriteria) => subscribeToTopic({ interactions: ['create', 'update', 'delete'], fhirPathCriteria })),
    );
    const steps = fc.sample(
      fc.array(fc.record({ id: fc.integer({ min: 1, max: 6 }), status: fc.constantFrom(...statuses), code: fc.constantFrom(...codes), kind: fc.nat(9) }), {
        minLength: 60,
        maxLength: 60,
      }),
      { numRuns: 1, seed },
    )[0]!;
    const current = new Map<string, Record<string, unknown>>();
    const expected: [string, number, boolean][][] = criteria.map(() => []);
    const decide = (interaction: Interaction, id: string, previous: Version | undefined, next: Version | undefined, version: number) => {
      for (const [index, expression] of criteria.entries()) {
        if (fhirpathFires(expression, { previous: previous ?? null, current: next ?? null })) expected[index]!.push([id, version, interaction === 'delete']);
      }
    };
    // The version each write made, as the store numbers it (a resource created again goes on from its deletion's number).
    const versionOf = async (sql: string, ...values: unknown[]) => (await database.pool.query<{ version_id: number }>(sql, values)).rows[0]!.version_id;
    for (const step of steps) {
      const id = `e${step.id}`;
      const before = current.get(id);
      const content = encounter(id, step.status, step.code);
      if (before === undefined) {
        decide('create', id, undefined, content, await versionOf(`INSERT INTO fhir.resources (content) VALUES ($1) RETURNING version_id`, content));
        current.set(id, content);
      } else if (step.kind === 0) {
        // A deletion is recorded as the next version, deleted.
        decide('delete', id, before, undefined, (await versionOf(`DELETE FROM fhir.resources WHERE id = $1 RETURNING version_id`, id)) + 1);
        current.delete(id);
      } else {
        decide('update', id, before, content, await versionOf(`UPDATE fhir.resources SET content = $2 WHERE id = $1 RETURNING version_id`, id, content));
        current.set(id, content);
      }
    }
    // One bulk statement over every live row: each row decided on its own versions.
    const { rows } = await database.pool.query<{ id: string; version_id: number }>(
      `UPDATE fhir.resources SET content = content || '{"status": "finished"}' WHERE resource_type = 'Encounter' RETURNING id, version_id`,
    );
    for (const { id, version_id } of rows) decide('update', id, current.get(id), { ...current.get(id), status: 'finished' }, version_id);
    for (const [index, subscription] of subscriptions.entries()) {
      const sort = (rows: [string, number, boolean][]) => [...rows].sort((a, b) => (a[0] === b[0] ? a[1] - b[1] : a[0] < b[0] ? -1 : 1));
      expect(sort(await events(subscription)), `${criteria[index]} (seed ${seed})`).toEqual(sort(expected[index]!));
      expect(expected[index]!.length, `${criteria[index]} fires at least once (seed ${seed})`).toBeGreaterThan(0);
    }
  });
});
