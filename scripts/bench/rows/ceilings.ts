import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { text } from 'node:stream/consumers';
import { fileURLToPath } from 'node:url';
import { Logger as WorkerLogger, run } from 'graphile-worker';
import pg from 'pg';
import { wallNow, type BenchReceiver } from '../../support/bench-receiver.ts';
import type { BareSending, BareSent } from '../harness/bare-sender.ts';
import { channelHeaders } from '../harness/deliveries.ts';
import { meterDatabaseCpu } from '../../support/database-cpu.ts';
import { until } from '../../support/waiting.ts';
import { perThousand } from '../harness/profile.ts';
import { logger, secret } from '../harness/run.ts';
import type { Row } from '../harness/table.ts';
import { drainedResource } from './drain.ts';

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

/**
 * The receiver's ceiling, like for like with the drain: the bodies its
 * deliveries carry (its resources as stored, version meta included, made by
 * the database without writing them) with the headers and signatures the
 * channel sends, POSTed by a bare undici process (harness/bare-sender.ts)
 * with the drain's calls in flight to one subscription, from the first call
 * to the last answer. The receiver checks every signature, as it does the drain's.
 */
export async function receiverCeiling(url: string, receiver: BenchReceiver, posts: number): Promise<Row> {
  let received = 0;
  let badSignatures = 0;
  receiver.onReceipt((receipt) => {
    received++;
    if (!receipt.signatureOk) badSignatures++;
  });
  const sending: BareSending = {
    endpoint: `http://127.0.0.1:${receiver.port}/ceiling`,
    channelHeaders,
    secret,
    bodies: (await drainedBodies(url, posts)).map((resource) => JSON.stringify(resource)),
  };
  const sender = spawn(process.execPath, [fileURLToPath(new URL('../harness/bare-sender.ts', import.meta.url))], {
    env: { ...process.env, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const exited = once(sender, 'exit');
  sender.stdin.end(JSON.stringify(sending));
  const output = await text(sender.stdout);
  const [code] = (await exited) as [number | null];
  if (code !== 0) throw new Error(`the bare sender exited with ${code}`);
  const { seconds, parallelCalls } = JSON.parse(output) as BareSent;
  await until(async () => received === posts, 10_000, "the receiver's reports of the bare POSTs");
  return {
    row: `ceiling: the receiver, the drain's bodies and headers POSTed by a bare undici process, ${parallelCalls} in flight`,
    figure: posts / seconds,
    unit: 'POSTs/s',
    checks: `${posts} POSTs: ${badSignatures} bad signatures`,
  };
}

/** The drain's first `count` resources as a delivery carries them: as the store stamps them (version 1), parsed as the dispatcher reads them. */
async function drainedBodies(url: string, count: number): Promise<unknown[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ content: unknown }>(
      `SELECT fhir.with_version_meta(${drainedResource}, 'drain-' || n, 1, clock_timestamp()) AS content FROM generate_series(1, $1::int) n`,
      [count],
    );
    return rows.map((row) => row.content);
  } finally {
    await client.end();
  }
}
