-- Up Migration

-- Jobs stranded by a database outage. A worker whose connection dies while
-- it completes a job (a PostgreSQL restart) leaves the job, and its
-- subscription's queue, locked by its worker pool. The pool is alive, so
-- neither graphile-worker (after 4 hours) nor the sweep of dead pools (0006)
-- frees them, and the queue stays blocked. With each heartbeat, a worker
-- process frees the jobs its own pool holds but is not running (it tells
-- which it runs); the queue's unlock wakes the workers (0008).

-- (Rewritten with migration 0018. As first written, this migration also
-- created webhook.release_stranded_jobs(pool_id, running), which unlocked
-- them by writing graphile-worker's private jobs and job-queue tables. A
-- migration must not depend on another library's private schema, which its
-- next release may change: a new database would fail here. Databases migrated
-- before keep those objects until 0018 drops them; a new database never has
-- them.)

-- Down Migration

-- Nothing: see above.
