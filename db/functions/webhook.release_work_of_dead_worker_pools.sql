-- Crash recovery for the workers (webhook.worker_pools).
--
-- Each worker process registers itself twice, with a heartbeat every 5
-- seconds (src/dispatch/liveness.ts): its graphile-worker pool, whose id its
-- jobs hold in locked_by (graphile-worker frees a dead pool's jobs only after
-- 4 hours), and its event sender, whose id its claims hold in
-- webhook.subscription_claims.claimed_by. A registration silent for 20
-- seconds is dead: the other processes (or the restarted one), which sweep as
-- they beat and at start, delete it, which frees its claims (the foreign key
-- deletes them), and free its jobs with graphile-worker's public
-- force_unlock_workers. So a `kill -9` delays its subscriptions by about 25
-- seconds, and the calls it had made but not recorded are made again (at
-- least once). A graphile-worker pool that never registered (a process that
-- died in its first moments) and holds a job for more than a minute is
-- freed too.
--
-- A heartbeat rather than PostgreSQL's view of sessions: it works whatever
-- role each worker logs in as (pg_stat_activity hides other roles' sessions),
-- it does not mistake a live process whose connection dropped for a dead one,
-- and it notices a host that vanished while its sessions linger.
--
-- Returns the registrations it freed.

CREATE OR REPLACE FUNCTION webhook.release_work_of_dead_worker_pools()
  RETURNS TABLE (pool_id text, kind text)
  LANGUAGE plpgsql
  AS $$
DECLARE
  silent_pools text[];
  silent_kinds text[];
  unregistered text[];
  graphile_pools text[];
BEGIN
  WITH silent AS (
    DELETE FROM webhook.worker_pools registered
    WHERE NOT webhook.worker_pool_is_live(registered.last_seen)
    RETURNING registered.pool_id, registered.kind
  )
  SELECT array_agg(silent.pool_id), array_agg(silent.kind) INTO silent_pools, silent_kinds FROM silent;
  SELECT array_agg(DISTINCT job.locked_by) INTO unregistered
  FROM graphile_worker.jobs job
  WHERE job.locked_by IS NOT NULL
    AND job.locked_at < now() - interval '1 minute'
    AND NOT EXISTS (SELECT FROM webhook.worker_pools registered WHERE registered.pool_id = job.locked_by);
  graphile_pools := array(
    SELECT dead.pool_id FROM unnest(silent_pools, silent_kinds) AS dead(pool_id, kind) WHERE dead.kind = 'graphile-worker'
    UNION
    SELECT unnest(unregistered));
  IF cardinality(graphile_pools) > 0 THEN
    PERFORM graphile_worker.force_unlock_workers(graphile_pools);
  END IF;
  RETURN QUERY
    SELECT dead.pool_id, dead.kind FROM unnest(silent_pools, silent_kinds) AS dead(pool_id, kind)
    UNION
    SELECT unnest(unregistered), 'graphile-worker';
END
$$;
