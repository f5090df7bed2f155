/**
 * What versioning costs a batch loader: one statement writing 20,000
 * Appointments into fhir.resources (BEFORE ROW stamp trigger + AFTER STATEMENT
 * history trigger) against the same statement on a copy of the table with the
 * same indexes and no triggers. Runs on DATABASE_URL's server, or on an
 * embedded PostgreSQL, in a scratch database it drops afterwards.
 *
 *   node scripts/bench-resource-load.ts [rows] [rounds]
 */
import { connectDatabase } from '../src/db/database.ts';
import { createScratchDatabase } from './support/scratch-database.ts';

const rows = Number(process.argv[2] ?? 20_000);
const rounds = Number(process.argv[3] ?? 5);

const appointments = `
  SELECT jsonb_build_object(
    'resourceType', 'Appointment', 'id', 'bench-' || n,
    'status', (ARRAY['booked', 'proposed', 'cancelled'])[1 + n % 3],
    'start', '2026-01-01T09:00:00Z', 'participant', jsonb_build_array(jsonb_build_object(
      'actor', jsonb_build_object('reference', 'Patient/p' || n % 1000), 'status', 'accepted'))) AS content, n
  FROM generate_series(1, ${rows}) n`;

const statements = {
  versioned: {
    insert: `INSERT INTO fhir.resources (content) SELECT content FROM (${appointments}) a`,
    update: `UPDATE fhir.resources SET content = content || '{"comment":"moved"}'`,
    delete: `DELETE FROM fhir.resources`,
  },
  plain: {
    insert: `INSERT INTO plain_resources (resource_type, id, version_id, last_updated, content)
             SELECT 'Appointment', 'bench-' || n, 1, clock_timestamp(), content FROM (${appointments}) a`,
    update: `UPDATE plain_resources SET content = content || '{"comment":"moved"}', version_id = version_id + 1, last_updated = clock_timestamp()`,
    delete: `DELETE FROM plain_resources`,
  },
};

async function main(): Promise<void> {
  const scratch = await createScratchDatabase();
  const { pool } = connectDatabase(scratch.url, (error) => console.error(error));
  try {
    await pool.query(`CREATE TABLE plain_resources (LIKE fhir.resources INCLUDING ALL)`);
    const timings: Record<string, number[]> = {};
    for (let round = 0; round < rounds; round++) {
      for (const [table, { insert, update, delete: remove }] of Object.entries(statements)) {
        for (const [step, statement] of Object.entries({ insert, update, delete: remove })) {
          const started = performance.now();
          await pool.query(statement);
          (timings[`${table} ${step}`] ??= []).push(performance.now() - started);
        }
        await pool.query('TRUNCATE fhir.resource_history');
      }
    }
    const median = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
    const version = await pool.query<{ server_version: string }>('SHOW server_version');
    console.log(`${rows} rows per statement, median of ${rounds} rounds (PostgreSQL ${version.rows[0]?.server_version})`);
    console.log('step    | no triggers | versioned | ratio');
    for (const step of ['insert', 'update', 'delete']) {
      const plain = median(timings[`plain ${step}`]!);
      const versioned = median(timings[`versioned ${step}`]!);
      console.log(`${step.padEnd(7)} | ${plain.toFixed(0).padStart(8)} ms | ${versioned.toFixed(0).padStart(6)} ms | ${(versioned / plain).toFixed(2)}x`);
    }
  } finally {
    await pool.end();
    await scratch.drop();
  }
}

await main();
