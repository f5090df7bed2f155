/**
 * npm run bench:history: what type and system history cost (issue 25), on
 * the embedded PostgreSQL 18 and, when DATABASE_URL is set, on its server
 * too, side by side.
 *
 * 1. Writes: what the two indexes of migration 0022 add to every version
 *    written: chunks of 1,000 Patients inserted with and without them
 *    (dropped for the second kind of round), rounds alternating, the median
 *    per chunk of each kind.
 * 2. Reads: on a history of 200,000 versions (100,000 Patients and
 *    Observations created, half of them updated, a tenth deleted), p50 and
 *    p95 of readHistoryPage() for the first page of the system's and a
 *    type's history, a page 20 pages deep (by its token), and a _since of
 *    the last minute; and the plan of the system page.
 *
 *   npm run bench:history [-- --resources N] [-- --rounds N]
 */
import { Command } from 'commander';
import { sql } from 'kysely';
import { connectDatabase, type DatabaseHandle } from '../src/db/database.ts';
import { readHistoryPage, type HistoryQuery, type HistoryScope } from '../src/resources/history.ts';
import { createScratchDatabase } from './support/scratch-database.ts';
import { percentile } from './support/statistics.ts';

const options = new Command('npm run bench:history --')
  .description('Type and system history: the write cost of its indexes, and its pages.')
  .option('--resources <n>', 'resources created before the reads (half Patients, half Observations)', '100000')
  .option('--rounds <n>', 'write rounds of each kind', '6')
  .parse()
  .opts<{ resources: string; rounds: string }>();

const resourceCount = Number(options.resources);
const rounds = Number(options.rounds);
const chunk = 1000;
const readRuns = 100;

/** Inserts `count` resources of `type` with ids prefix0..prefixN, as one statement. */
async function insert(database: DatabaseHandle, type: string, prefix: string, count: number): Promise<void> {
  const content =
    type === 'Patient'
      ? `jsonb_build_object('resourceType', 'Patient', 'id', '${prefix}' || n, 'active', true, 'name', jsonb_build_array(jsonb_build_object('family', 'F' || (n % 1000))))`
      : `jsonb_build_object('resourceType', 'Observation', 'id', '${prefix}' || n, 'status', 'final', 'code', jsonb_build_object('text', 'weight'), 'subject', jsonb_build_object('reference', 'Patient/p' || n))`;
  await database.pool.query(`INSERT INTO fhir.resources (content) SELECT ${content} FROM generate_series(1, $1) AS n`, [count]);
}

const historyIndexes = {
  resource_history_by_type_and_time: 'ON fhir.resource_history (resource_type, last_updated, id, version_id)',
  resource_history_by_time: 'ON fhir.resource_history (last_updated, resource_type, id, version_id)',
};

async function measureWrites(database: DatabaseHandle): Promise<void> {
  const timings: Record<'with' | 'without', number[]> = { with: [], without: [] };
  for (let round = 0; round < rounds * 2; round++) {
    const kind = round % 2 === 0 ? 'with' : 'without';
    if (kind === 'without') for (const name of Object.keys(historyIndexes)) await database.pool.query(`DROP INDEX fhir.${name}`);
    else for (const [name, definition] of Object.entries(historyIndexes)) await database.pool.query(`CREATE INDEX IF NOT EXISTS ${name} ${definition}`);
    // The same table size each round: emptied (TRUNCATE leaves the triggers out, which is what is wanted here).
    await database.pool.query('TRUNCATE fhir.resources, fhir.resource_history');
    for (let index = 0; index < 5; index++) {
      const started = performance.now();
      await insert(database, 'Patient', `w${round}-${index}-`, chunk);
      timings[kind].push(performance.now() - started);
    }
  }
  for (const [name, definition] of Object.entries(historyIndexes)) await database.pool.query(`CREATE INDEX IF NOT EXISTS ${name} ${definition}`);
  await database.pool.query('TRUNCATE fhir.resources, fhir.resource_history');
  const withIndexes = percentile(timings.with, 0.5);
  const without = percentile(timings.without, 0.5);
  console.log(
    `writes: ${chunk.toLocaleString('en')} Patients in one statement, median of ${timings.with.length}: ${withIndexes.toFixed(1)} ms with the history indexes, ` +
      `${without.toFixed(1)} ms without (${(withIndexes / without).toFixed(2)}x)`,
  );
}

async function measureReads(database: DatabaseHandle): Promise<void> {
  const half = resourceCount / 2;
  for (let start = 0; start < half; start += 10_000) {
    await insert(database, 'Patient', `p${start}-`, Math.min(10_000, half - start));
    await insert(database, 'Observation', `o${start}-`, Math.min(10_000, half - start));
  }
  await database.pool.query(`UPDATE fhir.resources SET content = content || '{"active": false}' WHERE resource_type = 'Patient'`);
  await database.pool.query(`UPDATE fhir.resources SET content = content || '{"status": "amended"}' WHERE resource_type = 'Observation'`);
  await database.pool.query(`DELETE FROM fhir.resources WHERE id LIKE '%0'`);
  await database.pool.query('ANALYZE fhir.resource_history');
  const { rows } = await database.pool.query<{ versions: string }>('SELECT count(*) AS versions FROM fhir.resource_history');
  console.log(`reads: a history of ${Number(rows[0]!.versions).toLocaleString('en')} versions, ${readRuns} runs each`);

  const deepToken = async (scope: HistoryScope) => {
    let page = await readHistoryPage(database.db, scope, { count: 100 });
    for (let index = 0; index < 20; index++) page = await readHistoryPage(database.db, scope, { count: 100, pageToken: page.nextPageToken! });
    return page.nextPageToken!;
  };
  const cases: [string, HistoryScope, HistoryQuery][] = [
    ['system, first page of 100', {}, { count: 100 }],
    ['Patient, first page of 100', { type: 'Patient' }, { count: 100 }],
    ['system, 21 pages deep', {}, { count: 100, pageToken: await deepToken({}) }],
    ['Observation, 21 pages deep', { type: 'Observation' }, { count: 100, pageToken: await deepToken({ type: 'Observation' }) }],
    ['system, _since a minute ago', {}, { count: 100, since: new Date(Date.now() - 60_000).toISOString() }],
  ];
  for (const [name, scope, query] of cases) {
    const durations: number[] = [];
    for (let run = 0; run < readRuns + 10; run++) {
      const started = performance.now();
      await readHistoryPage(database.db, scope, query);
      if (run >= 10) durations.push(performance.now() - started);
    }
    console.log(`  ${name}: p50 ${percentile(durations, 0.5).toFixed(2)} ms, p95 ${percentile(durations, 0.95).toFixed(2)} ms`);
  }
  const plan = await sql<{ 'QUERY PLAN': string }>`
    EXPLAIN SELECT h.version_id FROM fhir.resource_history h
    ORDER BY h.last_updated DESC, h.resource_type DESC, h.id DESC, h.version_id DESC LIMIT 101`.execute(database.db);
  console.log(`  plan of the system page: ${plan.rows.map((row) => row['QUERY PLAN'].trim()).join(' / ')}`);
}

const servers: { name: string; url: string | null }[] = [
  { name: 'embedded PostgreSQL', url: null },
  ...(process.env.DATABASE_URL ? [{ name: 'DATABASE_URL', url: process.env.DATABASE_URL }] : []),
];

for (const server of servers) {
  const scratch = await createScratchDatabase(server.url);
  const database = connectDatabase(scratch.url, (error) => console.error(error), { maxConnections: 2 });
  try {
    const { rows } = await database.pool.query<{ server_version: string }>('SHOW server_version');
    console.log(`\n## ${server.name}: PostgreSQL ${rows[0]!.server_version}`);
    await measureWrites(database);
    await measureReads(database);
  } finally {
    await database.close();
    await scratch.drop();
  }
}
