import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { cpuSeconds } from './process-stats.ts';

/**
 * The CPU time a database's backends spend while something runs: its client
 * sessions and the autovacuum workers on it, read from Linux (/proc) every
 * 250 ms by the pids pg_stat_activity gives, so only for a server on this
 * machine. The server's own processes (WAL writer, checkpointer) are shared
 * by every database and left out, and so are the bench's own sessions that
 * watch it (instrumentApplicationName). A backend that ends between two readings
 * loses at most 250 ms of its time.
 */
/** The application_name of the bench's own sessions that watch the database (this meter, the bench's sampler): their CPU is not the engine's. */
export const instrumentApplicationName = 'bench-instrument';

export type DatabaseCpuMeter = {
  /** CPU seconds since the meter started; undefined when the server's processes cannot be read here. Stopping again gives the same. */
  stop(): Promise<number | undefined>;
};

export async function meterDatabaseCpu(url: string): Promise<DatabaseCpuMeter> {
  const client = new pg.Client({ connectionString: url, application_name: instrumentApplicationName });
  await client.connect();
  const readings = new Map<number, { first: number; last: number }>();
  const read = async (starting: boolean) => {
    const { rows } = await client.query<{ pid: number }>(
      'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name IS DISTINCT FROM $1',
      [instrumentApplicationName],
    );
    for (const { pid } of rows) {
      const seconds = postgresCpuSeconds(pid);
      if (seconds === undefined) continue;
      const known = readings.get(pid);
      // A backend started meanwhile spent all its time in the run.
      if (known === undefined) readings.set(pid, { first: starting ? seconds : 0, last: seconds });
      else known.last = seconds;
    }
  };
  await read(true);
  let running = true;
  const sampling = (async () => {
    while (running) {
      await sleep(250);
      await read(false);
    }
  })();
  const stop = async () => {
    running = false;
    await sampling;
    await read(false);
    await client.end();
    // None read: the server is elsewhere (or in another pid namespace).
    if (readings.size === 0) return undefined;
    return [...readings.values()].reduce((sum, { first, last }) => sum + (last - first), 0);
  };
  let stopped: Promise<number | undefined> | undefined;
  return { stop: () => (stopped ??= stop()) };
}

/** A postgres process's CPU seconds, or undefined when the pid is not a postgres process of this machine. */
function postgresCpuSeconds(pid: number): number | undefined {
  try {
    if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() !== 'postgres') return undefined;
    return cpuSeconds(pid);
  } catch {
    return undefined;
  }
}
