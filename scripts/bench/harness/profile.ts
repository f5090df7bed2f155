import { cpus } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { instrumentApplicationName, meterDatabaseCpu } from '../../support/database-cpu.ts';
import { cpuSeconds } from '../../support/process-stats.ts';
import type { Bench } from './dispatcher.ts';
import type { Row } from './table.ts';

/** CPU time of all cores since boot, in ms: busy and total. */
function machineTimes(): { busy: number; total: number } {
  let busy = 0;
  let total = 0;
  for (const { times } of cpus()) {
    busy += times.user + times.nice + times.sys + times.irq;
    total += times.user + times.nice + times.sys + times.irq + times.idle;
  }
  return { busy, total };
}

/**
 * Where the time goes while `work` runs: the dispatcher processes' CPU (100%
 * = one core), the database's backends' (meterDatabaseCpu), the whole
 * machine's busy share, and what the database's sessions are doing and
 * running, sampled every 100 ms from pg_stat_activity (wait events; "CPU"
 * when active with none).
 */
export async function profiled<T>(
  { database, dispatchers, kind }: Bench,
  work: () => Promise<T>,
): Promise<{ result: T; profile: { text: string; databaseCpuSeconds: number | undefined; dispatcherCpuSeconds: number } }> {
  const url = database.connectionString;
  const databaseCpu = await meterDatabaseCpu(url);
  const sampler = new pg.Client({ connectionString: url, application_name: instrumentApplicationName });
  await sampler.connect();
  const states = new Map<string, number>();
  const statements = new Map<string, number>();
  let samples = 0;
  let running = true;
  const sampling = (async () => {
    while (running) {
      const { rows } = await sampler.query<{ state: string; statement: string; n: number }>(
        `SELECT CASE WHEN state = 'active' THEN coalesce(wait_event_type || ':' || wait_event, 'CPU') ELSE state END AS state,
                CASE WHEN state = 'active' THEN left(regexp_replace(query, '\\s+', ' ', 'g'), 70) END AS statement, count(*)::int AS n
         FROM pg_stat_activity
         WHERE datname = current_database() AND application_name IS DISTINCT FROM $1 AND state <> 'idle' AND backend_type = 'client backend'
         GROUP BY 1, 2`,
        [instrumentApplicationName],
      );
      samples++;
      for (const { state, statement, n } of rows) {
        states.set(state, (states.get(state) ?? 0) + n);
        if (statement !== null) statements.set(statement, (statements.get(statement) ?? 0) + n);
      }
      await sleep(100);
    }
  })();
  const dispatcherCpu = () => dispatchers.reduce((sum, pid) => sum + cpuSeconds(pid), 0);
  const cpuBefore = dispatcherCpu();
  const machineBefore = machineTimes();
  const startedAt = performance.now();
  try {
    const result = await work();
    const elapsedMs = performance.now() - startedAt;
    const cpu = dispatcherCpu() - cpuBefore;
    const machineAfter = machineTimes();
    const busy = (machineAfter.busy - machineBefore.busy) / (machineAfter.total - machineBefore.total);
    const sessions = [...states]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 5)
      .map(([state, n]) => `${state} ${(n / samples).toFixed(1)}`)
      .join(', ');
    const busiest = [...statements]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 5)
      .map(([statement, n]) => `${(n / samples).toFixed(2)} ${statement}`)
      .join('\n    ');
    const databaseCpuSeconds = await databaseCpu.stop();
    const text =
      `the ${kind} process ${(((cpu * 1000) / elapsedMs) * 100).toFixed(0)}% of a core, ` +
      (databaseCpuSeconds === undefined ? '' : `the database's backends ${(((databaseCpuSeconds * 1000) / elapsedMs) * 100).toFixed(0)}%, `) +
      `machine ${(busy * 100).toFixed(0)}% busy of ${cpus().length} cores; ` +
      `database sessions on average: ${sessions}; active statements on average:\n    ${busiest}`;
    return { result, profile: { text, databaseCpuSeconds, dispatcherCpuSeconds: cpu } };
  } finally {
    running = false;
    await sampling;
    await sampler.end();
    await databaseCpu.stop();
  }
}

/** CPU seconds per 1,000 deliveries of the dispatcher's process and of the database's backends (what the capacity model in docs/performance.md is made of). */
export function cpuPerThousand(profile: { databaseCpuSeconds: number | undefined; dispatcherCpuSeconds: number }, deliveries: number): string {
  const per = (seconds: number) => `${((seconds / deliveries) * 1000).toFixed(3)} s`;
  return `CPU per 1,000 deliveries: the dispatcher process ${per(profile.dispatcherCpuSeconds)}${profile.databaseCpuSeconds === undefined ? '' : `, the database ${per(profile.databaseCpuSeconds)}`}`;
}

/** The database's CPU per 1,000 of `count` (deliveries, jobs), when it could be read. */
export function perThousand(databaseCpuSeconds: number | undefined, count: number): Pick<Row, 'databaseCpuPerThousand'> {
  return databaseCpuSeconds === undefined ? {} : { databaseCpuPerThousand: (databaseCpuSeconds / count) * 1000 };
}
