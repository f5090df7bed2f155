import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { waitFor } from '../support/receiver.ts';
import { startHealthyAndFailing, type HealthyAndFailing } from '../support/subscriptions.ts';

/**
 * docs/dba.md's queries, each run with psql as a DBA would run it, against a
 * database where what they ask about happened: a subscription that went to
 * error, another with work waiting (its workers stopped), a resource
 * delivered.
 */

/** psql runs the page's queries, as a DBA would; without it, outside CI, this file is skipped. */
const psqlInstalled = spawnSync('psql', ['--version']).status === 0;
const runHere = psqlInstalled || process.env.CI !== undefined;

/** The page's sections that hold a query: its ### heading and its sql block. */
const queries = new Map([...readFileSync('docs/dba.md', 'utf8').matchAll(/^### (.+)\n[\s\S]*?```sql\n([\s\S]*?)```/gm)].map((match) => [match[1]!, match[2]!]));

let t: TestApp;
let scene: HealthyAndFailing;
let deliveredPatient: string;

beforeAll(async () => {
  if (!runHere) return;
  t = await startTestApp();
  scene = await startHealthyAndFailing(t, { healthyCriteria: 'Patient?family=Waiting', failingStatus: 500 });
  deliveredPatient = (await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Waiting' }] })).json<{ id: string }>().id;
  await waitFor(async () =>
    (await t.database.pool.query(`SELECT 1 FROM webhook.delivery_attempts WHERE resource_id = $1`, [deliveredPatient])).rowCount === 1 ? true : undefined,
  );
  // No workers from here: the next event waits in the queue.
  await scene.stopWorkers();
  await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Waiting' }] });
}, 60_000);

afterAll(async () => {
  await scene?.close();
  await t?.close();
});

/** Runs one of the page's blocks with psql, its variables given as a DBA would; unaligned output, `|` between columns. */
function runQuery(heading: string): string {
  const query = queries.get(heading);
  if (query === undefined) throw new Error(`docs/dba.md has no query under "### ${heading}"`);
  const variables = { subscription_id: scene.failing, resource_type: 'Patient', resource_id: deliveredPatient };
  const result = spawnSync(
    'psql',
    [
      t.database.url,
      '-X',
      '--no-psqlrc',
      '-v',
      'ON_ERROR_STOP=1',
      '-A',
      '-F',
      '|',
      ...Object.entries(variables).flatMap(([name, value]) => ['-v', `${name}=${value}`]),
    ],
    { input: query, encoding: 'utf8' },
  );
  expect(result.stderr).toBe('');
  expect(result.status).toBe(0);
  return result.stdout;
}

describe.skipIf(!runHere)('docs/dba.md, run with psql (skipped where psql is missing, outside CI)', () => {
  it('has the queries this test knows, and no other', () => {
    expect([...queries.keys()]).toEqual([
      'Why did a subscription go to error?',
      'Which subscriptions are failing?',
      'What is waiting to be delivered?',
      'Where is a subscription in its event stream?',
      'What was delivered for a resource?',
      'How big are the tables?',
      'What is safe to delete?',
    ]);
  });

  it("the page's psql hint for the views' comments works in this psql", () => {
    const hint = /`(\\dv\+ webhook\.\*)` in psql lists the views/.exec(readFileSync('docs/dba.md', 'utf8'))?.[1];
    expect(hint).toBeDefined();
    const result = spawnSync('psql', [t.database.url, '-X', '--no-psqlrc', '-A', '-c', hint!], { encoding: 'utf8' });
    expect(result.status, result.stderr).toBe(0);
    expect(result.stdout).toContain('pending_work|view|');
    expect(result.stdout).toContain('Work not done yet, per subscription');
  });

  it('why a subscription went to error: its reason, then the failed call', () => {
    const output = runQuery('Why did a subscription go to error?');
    expect(output).toMatch(/^error\|HTTP 500 from http:\/\/127\.0\.0\.1:\d+\/hook; Patient\/[\w-]+ \(version 1\) was not delivered\|0\|/m);
    expect(output).toMatch(/\|notification\|1\|failed\|500\|HTTP 500\|Patient\|/);
    expect(output).toMatch(/\|handshake\|1\|delivered\|200\|/);
  });

  it('which subscriptions are failing: the one in error, not the healthy one', () => {
    const output = runQuery('Which subscriptions are failing?');
    expect(output).toContain(`${scene.failing}|error|Patient?family=Failing|`);
    expect(output).not.toContain(scene.healthy);
  });

  it('what is waiting: the event written while no worker ran, for its subscription', () => {
    const output = runQuery('What is waiting to be delivered?');
    expect(output).toMatch(new RegExp(`^${scene.healthy}\\|Patient\\?family=Waiting\\|active\\|notification\\|1\\|1\\|0\\|0\\|`, 'm'));
  });

  it('where a subscription is in its stream: the number of the event it failed on, not held by a worker', () => {
    const output = runQuery('Where is a subscription in its event stream?');
    expect(output).toMatch(/^1\|\|\|\|\n/m);
    expect(output).toMatch(/^1\|failed\|Patient\|[\w-]+\|1\|1\|/m);
  });

  it('what was delivered for a resource: its version, to the subscription it matched', () => {
    const output = runQuery('What was delivered for a resource?');
    expect(output).toContain(`|${scene.healthy}|Patient?family=Waiting|notification|1|1|delivered|200|`);
    expect(output).toMatch(/\(1 row\)/);
  });

  it('how big the tables are', () => {
    const output = runQuery('How big are the tables?');
    for (const table of ['fhir.resources', 'fhir.resource_history', 'webhook.subscriptions', 'webhook.delivery_attempts', 'webhook.subscription_events']) {
      expect(output).toContain(`${table}|`);
    }
  });

  it('what is safe to delete: the statements run, and the block rolls back', async () => {
    const before = await t.database.pool.query('SELECT count(*)::int AS n FROM webhook.delivery_attempts');
    const output = runQuery('What is safe to delete?');
    expect(output.match(/^DELETE \d+$/gm)).toHaveLength(3);
    expect(output.trim().endsWith('ROLLBACK')).toBe(true);
    expect((await t.database.pool.query('SELECT count(*)::int AS n FROM webhook.delivery_attempts')).rows).toEqual(before.rows);
  });
});
