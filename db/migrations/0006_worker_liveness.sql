-- Up Migration

-- Crash recovery for the dispatcher's workers.
--
-- graphile-worker locks each job it runs with the id of the worker pool (one
-- per worker process) that took it, and frees the locks of a pool that died
-- only after 4 hours: a `kill -9` would hold up to WORKER_CONCURRENCY
-- notifications that long. So each worker process registers its pool here
-- and beats every 5 seconds (src/dispatch/liveness.ts). A pool silent for 30
-- seconds is dead: the other worker processes (or the restarted one), which
-- sweep as they beat and at start, free its jobs, and they run again — at
-- least once: a call the dead process had made may be repeated.
--
-- A heartbeat rather than PostgreSQL's view of sessions: it works whatever
-- role each worker logs in as (pg_stat_activity hides other roles' sessions),
-- it does not mistake a live process whose connection dropped for a dead one,
-- and it notices a host that vanished while its sessions linger.

CREATE TABLE webhook.worker_pools (
  -- graphile-worker's worker pool id: what its jobs hold in locked_by.
  pool_id text PRIMARY KEY,
  -- Where the process runs, for whoever reads this table.
  host text NOT NULL,
  process_id integer NOT NULL,
  registered_at timestamptz NOT NULL DEFAULT now(),
  -- The last heartbeat, by the database's clock.
  last_seen timestamptz NOT NULL DEFAULT now()
);

-- Frees the jobs of the worker pools that are gone, and returns their ids:
-- registered pools silent for 30 seconds (their row goes too), and pools that
-- never registered (a process that died within its first moments) holding a
-- lock for more than a minute.
CREATE FUNCTION webhook.release_jobs_of_dead_worker_pools() RETURNS SETOF text
  LANGUAGE plpgsql AS $$
DECLARE
  dead text[];
BEGIN
  WITH silent AS (
    DELETE FROM webhook.worker_pools
    WHERE last_seen < now() - interval '30 seconds'
    RETURNING pool_id
  ), unregistered AS (
    SELECT DISTINCT job.locked_by AS pool_id
    FROM graphile_worker.jobs job
    WHERE job.locked_by IS NOT NULL
      AND job.locked_at < now() - interval '1 minute'
      AND NOT EXISTS (SELECT 1 FROM webhook.worker_pools pool WHERE pool.pool_id = job.locked_by)
  )
  SELECT array_agg(pool_id) INTO dead FROM (SELECT pool_id FROM silent UNION SELECT pool_id FROM unregistered) pools;
  IF dead IS NOT NULL THEN
    PERFORM graphile_worker.force_unlock_workers(dead);
    RETURN QUERY SELECT unnest(dead);
  END IF;
END
$$;

-- (Until migration 0018 this read graphile-worker's private jobs table; its
-- public view has the same columns.)

-- Down Migration

DROP FUNCTION webhook.release_jobs_of_dead_worker_pools();
DROP TABLE webhook.worker_pools;
