import type pg from 'pg';

/** A registration of webhook.worker_pools whose process died, by its id and kind. */
export type DeadWorkerPool = { poolId: string; kind: string };

/**
 * Frees the work of the worker processes that died: deletes the registrations
 * silent for 20 s, which frees their claims, and frees their graphile-worker
 * jobs (db/functions/webhook.release_work_of_dead_worker_pools.sql); returns
 * the registrations it freed.
 */
export async function releaseWorkOfDeadWorkerPools(pool: pg.Pool): Promise<DeadWorkerPool[]> {
  const { rows } = await pool.query<{ pool_id: string; kind: string }>('SELECT pool_id, kind FROM webhook.release_work_of_dead_worker_pools()');
  return rows.map((row) => ({ poolId: row.pool_id, kind: row.kind }));
}
