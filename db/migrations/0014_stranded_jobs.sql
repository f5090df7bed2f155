-- Up Migration

-- Jobs stranded by a database outage. A worker whose connection dies while
-- it completes a job (a PostgreSQL restart) leaves the job, and its
-- subscription's queue, locked by its worker pool. The pool is alive, so
-- neither graphile-worker (after 4 hours) nor the sweep of dead pools (0006)
-- frees them, and the queue stays blocked. With each heartbeat, a worker
-- process frees the jobs its own pool holds but is not running (it tells
-- which it runs); the queue's unlock wakes the workers (0008).

CREATE FUNCTION webhook.release_stranded_jobs(pool_id text, running bigint[]) RETURNS integer
  LANGUAGE sql AS $$
  WITH released AS (
    UPDATE graphile_worker._private_jobs job
    SET locked_at = NULL, locked_by = NULL
    WHERE job.locked_by = release_stranded_jobs.pool_id
      AND NOT (job.id = ANY (release_stranded_jobs.running))
      -- Not one just fetched, whose start the process has not seen yet.
      AND job.locked_at < now() - interval '10 seconds'
    RETURNING job.job_queue_id
  ), unlocked_queues AS (
    -- Run whether or not the answer reads it, as every data-modifying WITH is.
    UPDATE graphile_worker._private_job_queues queue
    SET locked_at = NULL, locked_by = NULL
    WHERE queue.locked_by = release_stranded_jobs.pool_id
      AND queue.id IN (SELECT job_queue_id FROM released)
  )
  SELECT count(*)::integer FROM released
$$;

COMMENT ON FUNCTION webhook.release_stranded_jobs(text, bigint[]) IS
  'Frees the jobs (and their queues) that a live worker pool holds but does not run: stranded by a lost connection. Called by the pool''s heartbeat.';

-- Down Migration

DROP FUNCTION webhook.release_stranded_jobs(text, bigint[]);
