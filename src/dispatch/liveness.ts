import { hostname } from 'node:os';
import type pg from 'pg';
import type { Logger } from 'pino';

/**
 * How often a worker process beats and sweeps. A pool silent for 30 s is dead
 * (db/migrations/0006_worker_liveness.sql): a crash costs at most about 35 s,
 * plus graphile-worker's 2 s poll.
 */
const heartbeatIntervalMs = 5_000;

export type Liveness = { stop(): Promise<void> };

/**
 * Crash recovery: registers this process's worker pool in webhook.worker_pools,
 * then every 5 s beats (registering again if a sweep took it for dead during a
 * database outage), frees the jobs of pools whose process died, and frees the
 * jobs its own pool holds but does not run (`running` says which it runs):
 * those a lost connection stranded mid-completion.
 */
export async function keepWorkerPoolAlive(pool: pg.Pool, poolId: string, running: () => string[], logger: Logger): Promise<Liveness> {
  const beat = () =>
    pool.query(
      `INSERT INTO webhook.worker_pools (pool_id, host, process_id) VALUES ($1, $2, $3)
       ON CONFLICT (pool_id) DO UPDATE SET last_seen = now()`,
      [poolId, hostname(), process.pid],
    );
  const sweep = async () => {
    const { rows } = await pool.query<{ pool_id: string }>('SELECT webhook.release_jobs_of_dead_worker_pools() AS pool_id');
    for (const { pool_id } of rows) logger.warn({ workerPool: pool_id }, 'freed the jobs of a worker pool whose process is gone');
    const stranded = await pool.query<{ released: number }>('SELECT webhook.release_stranded_jobs($1, $2::bigint[]) AS released', [poolId, running()]);
    const released = stranded.rows[0]?.released ?? 0;
    if (released > 0) logger.warn({ workerPool: poolId, jobs: released }, 'freed jobs this process held but no longer ran (a lost database connection)');
  };

  // At start: a restarted process frees its dead predecessor's jobs at once.
  await beat();
  await sweep();
  const timer = setInterval(() => {
    beat()
      .then(sweep)
      .catch((error: unknown) => logger.warn({ err: error }, 'the worker pool heartbeat failed; it tries again in 5 s'));
  }, heartbeatIntervalMs);
  timer.unref();
  return {
    stop: async () => {
      clearInterval(timer);
      await pool.query('DELETE FROM webhook.worker_pools WHERE pool_id = $1', [poolId]);
    },
  };
}
