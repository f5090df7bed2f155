import { Logger as WorkerLogger, run } from 'graphile-worker';
import pg from 'pg';
import { Agent, request } from 'undici';
import { wallNow, type BenchReceiver } from '../../support/bench-receiver.ts';
import { meterDatabaseCpu } from '../../support/database-cpu.ts';
import { until } from '../../support/waiting.ts';
import { perThousand } from '../harness/profile.ts';
import { logger } from '../harness/run.ts';
import type { Row } from '../harness/table.ts';

const quiet = new WorkerLogger(() => () => undefined);

export async function graphileWorkerCeiling(url: string, jobs: number): Promise<Row> {
  const pool = new pg.Pool({ connectionString: url, max: 12 });
  const report = (error: Error) => logger.warn({ err: error }, 'a connection failed');
  pool.on('error', report);
  pool.on('connect', (client) => client.on('error', report));
  const runner = await run({ pgPool: pool, concurrency: 10, noHandleSignals: true, logger: quiet, taskList: { bench_noop: async () => undefined } });
  const databaseCpu = await meterDatabaseCpu(url);
  try {
    await pool.query(
      `SELECT graphile_worker.add_jobs(array(
         SELECT ('bench_noop', '{}'::json, NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec FROM generate_series(1, $1::int)))`,
      [jobs],
    );
    const committed = wallNow();
    await until(
      async () => (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM graphile_worker.jobs')).rows[0]!.n === 0,
      120_000,
      'the no-op jobs',
    );
    const rate = jobs / ((wallNow() - committed) / 1000);
    return { row: 'ceiling: graphile-worker no-op jobs, concurrency 10', figure: rate, unit: 'jobs/s', ...perThousand(await databaseCpu.stop(), jobs) };
  } finally {
    await databaseCpu.stop();
    await runner.stop();
    await pool.end();
  }
}

export async function receiverCapacity(receiver: BenchReceiver, posts: number): Promise<Row> {
  receiver.onReceipt(() => undefined);
  const agent = new Agent({ connections: 16 });
  const body = JSON.stringify({ resourceType: 'Appointment', id: 'capacity', meta: { versionId: '1' }, status: 'booked', participant: [] });
  let sent = 0;
  const started = wallNow();
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (sent < posts) {
        sent++;
        const response = await request(`http://127.0.0.1:${receiver.port}/capacity`, {
          method: 'POST',
          body,
          dispatcher: agent,
          headers: { 'content-type': 'application/fhir+json' },
        });
        await response.body.dump();
      }
    }),
  );
  const rate = posts / ((wallNow() - started) / 1000);
  await agent.close();
  return { row: 'ceiling: the receiver, undici POSTs with no dispatcher', figure: rate, unit: 'POSTs/s' };
}
