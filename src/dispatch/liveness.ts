import { hostname } from 'node:os';
import type pg from 'pg';
import type { Logger } from 'pino';
import { releaseWorkOfDeadWorkerPools } from '../db/sql/release-work-of-dead-worker-pools.ts';

/**
 * How often a worker process beats and sweeps. A registration silent for 20 s
 * is dead (db/functions/webhook.release_work_of_dead_worker_pools.sql): a
 * crash delays its work by at most about 25 s.
 */
const heartbeatIntervalMs = 5_000;

export type Liveness = { stop(): Promise<void> };

/** What a process registers in webhook.worker_pools: its graphile-worker pool, its event sender, or its websocket server (an API process). */
export type Registration = { poolId: string; kind: 'graphile-worker' | 'event-sender' | 'websocket-server' };

/**
 * Crash recovery: registers in webhook.worker_pools, then every 5 s beats
 * (registering again if a sweep took it for dead during a database outage),
 * frees the work of registrations whose process died, and runs `ownSweep`:
 * what it holds but no longer works on (a lost connection stranded it).
 */
export async function keepWorkerPoolAlive(
  pool: pg.Pool,
  { poolId, kind }: Registration,
  ownSweep: () => Promise<void>,
  logger: Pick<Logger, 'warn'>,
): Promise<Liveness> {
  const beat = () =>
    pool.query(
      `INSERT INTO webhook.worker_pools (pool_id, host, process_id, kind) VALUES ($1, $2, $3, $4)
       ON CONFLICT (pool_id) DO UPDATE SET last_seen = now()`,
      [poolId, hostname(), process.pid, kind],
    );
  const sweep = async () => {
    for (const dead of await releaseWorkOfDeadWorkerPools(pool)) {
      logger.warn({ workerPool: dead.poolId, kind: dead.kind }, 'freed the work of a worker process that is gone');
    }
    await ownSweep();
  };

  // At start: a restarted process frees its dead predecessor's work at once.
  await beat();
  await sweep();
  const timer = setInterval(() => {
    beat()
      .then(sweep)
      .catch((error: unknown) => logger.warn({ err: error }, 'the worker heartbeat failed; it tries again in 5 s'));
  }, heartbeatIntervalMs);
  timer.unref();
  return {
    stop: async () => {
      clearInterval(timer);
      await pool.query('DELETE FROM webhook.worker_pools WHERE pool_id = $1', [poolId]);
    },
  };
}
