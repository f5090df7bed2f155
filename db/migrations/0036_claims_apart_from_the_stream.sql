-- Up Migration

-- Issue 35, item 5: a claim no longer writes its subscription's stream row.
-- Until now a claim marked the row claimed (claimed_by, claimed_at) and the
-- release cleared it: two versions of the row per claim. While a snapshot is
-- held (a DBA's hour-long report), no version can be pruned, and every lookup
-- of the row by key walked them all: a 40-minute soak on the embedded 18.4
-- went from a p99 of 29 ms in its first quarter to 190 ms in its last, 6.6
-- times (docs/performance.md).
--
-- A claim is now a row of a table of its own, inserted by the claim and
-- deleted by the release, split like the pending set into the two
-- generations (migration 0034): new claims go to the current one, and
-- webhook.rotate_pending_events moves the claims still held in the older one
-- into the current and TRUNCATEs the older, so the dead rows a claim walks
-- are those of the last seconds whatever snapshots are held.
--
-- The claim stays exclusive: a claimer locks the subscription's stream row
-- (FOR UPDATE SKIP LOCKED, which marks the row in place and makes no new
-- version), then, in a statement of its own, checks that no claim row
-- exists, then inserts its own. A claim row is only ever inserted by a
-- transaction holding that lock, so the check sees every claim made before
-- it; a release deletes its row without the lock.
CREATE TABLE webhook.subscription_claims (
  generation smallint NOT NULL,
  subscription_id uuid NOT NULL REFERENCES webhook.subscription_streams ON DELETE CASCADE,
  -- A dead sender's claims go with its registration (webhook.release_work_of_dead_worker_pools).
  claimed_by text NOT NULL REFERENCES webhook.worker_pools (pool_id) ON DELETE CASCADE,
  claimed_at timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (generation);

CREATE TABLE webhook.subscription_claims_0 PARTITION OF webhook.subscription_claims FOR VALUES IN (0);
CREATE TABLE webhook.subscription_claims_1 PARTITION OF webhook.subscription_claims FOR VALUES IN (1);

-- Every claim, release and check finds a subscription's claim by key.
CREATE INDEX subscription_claims_by_subscription ON webhook.subscription_claims (subscription_id);

COMMENT ON TABLE webhook.subscription_claims IS
  'The subscriptions a worker process is sending now, one row each (at most one per subscription: a claimer holds the lock of its webhook.subscription_streams row while it checks and inserts). A partition per generation of webhook.pending_events_generation, the older one truncated every few seconds (webhook.rotate_pending_events).';
COMMENT ON COLUMN webhook.subscription_claims.generation IS
  'The partition: the current generation when the claim was made, or when a rotation moved it.';
COMMENT ON COLUMN webhook.subscription_claims.claimed_by IS
  'The event sender holding the claim (webhook.worker_pools, kind event-sender); deleted with its registration when it dies.';
COMMENT ON COLUMN webhook.subscription_claims.claimed_at IS
  'When it was claimed: a claim kept across batches keeps its first time (src/dispatch/events/log.ts frees one held over 10 s by nobody working on it).';

-- The claims held now move over (a rolling upgrade: docs/operators.md says to
-- stop the workers of the release before first, so there should be none).
INSERT INTO webhook.subscription_claims (generation, subscription_id, claimed_by, claimed_at)
SELECT (SELECT current_generation FROM webhook.pending_events_generation), stream.subscription_id, stream.claimed_by, coalesce(stream.claimed_at, now())
FROM webhook.subscription_streams stream
WHERE stream.claimed_by IS NOT NULL;

-- The DBA's view of pending work reads the claims; its columns and meaning
-- are unchanged.
CREATE OR REPLACE VIEW webhook.pending_work AS
  SELECT s.id AS subscription_id, s.criteria, s.endpoint, s.status,
         'notification' AS work,
         count(*) AS items,
         count(*) FILTER (WHERE claim.claimed_by IS NULL AND coalesce(e.not_before, '-infinity') <= now()) AS waiting,
         count(*) FILTER (WHERE claim.claimed_by IS NULL AND e.not_before > now()) AS scheduled,
         count(*) FILTER (WHERE claim.claimed_by IS NOT NULL) AS sending,
         min(e.written_at) FILTER (WHERE coalesce(e.not_before, '-infinity') <= now()) AS waiting_since,
         min(e.not_before) FILTER (WHERE e.not_before > now()) AS next_run_at,
         max(e.attempts) AS most_attempts,
         NULL::text AS last_job_error
  FROM webhook.pending_events pending
  JOIN webhook.subscription_events e ON e.id = pending.event_id
  LEFT JOIN webhook.subscriptions s ON s.id = e.subscription_id
  LEFT JOIN LATERAL (SELECT c.claimed_by FROM webhook.subscription_claims c WHERE c.subscription_id = e.subscription_id LIMIT 1) claim ON true
  GROUP BY s.id, s.criteria, s.endpoint, s.status
  UNION ALL
  -- graphile-worker's jobs, as migration 0018 made them.
  SELECT s.id, s.criteria, s.endpoint, s.status,
         job.task_identifier,
         count(*),
         count(*) FILTER (WHERE job.locked_at IS NULL AND job.run_at <= now()),
         count(*) FILTER (WHERE job.locked_at IS NULL AND job.run_at > now()),
         count(*) FILTER (WHERE job.locked_at IS NOT NULL),
         min(job.run_at) FILTER (WHERE job.locked_at IS NULL AND job.run_at <= now()),
         min(job.run_at) FILTER (WHERE job.locked_at IS NULL AND job.run_at > now()),
         max(job.attempts),
         (array_agg(job.last_error ORDER BY job.updated_at DESC) FILTER (WHERE job.last_error IS NOT NULL))[1]
  FROM graphile_worker.jobs job
  LEFT JOIN webhook.subscriptions s ON s.id::text = substring(job.key FROM '^(?:handshake|reactivate):(.*)$')
  GROUP BY s.id, s.criteria, s.endpoint, s.status, job.task_identifier;

ALTER TABLE webhook.subscription_streams DROP COLUMN claimed_by, DROP COLUMN claimed_at;

COMMENT ON TABLE webhook.subscription_streams IS
  'Per subscription: the floor of its event numbers (last_event_number) and when a throttled subscription''s next call may start (next_call_at). Who is sending its events is webhook.subscription_claims.';

COMMENT ON COLUMN webhook.worker_pools.kind IS
  'graphile-worker: a graphile-worker pool (its id is what its jobs hold in locked_by); event-sender: a process sending subscription events (what webhook.subscription_claims.claimed_by holds); websocket-server: an API process holding websocket clients (what webhook.websocket_bindings.server_id holds).';

-- Down Migration

-- The version before reads the claims from the stream rows (and its functions,
-- db/functions as they were, must be applied again).
ALTER TABLE webhook.subscription_streams
  ADD COLUMN claimed_by text REFERENCES webhook.worker_pools (pool_id) ON DELETE SET NULL,
  ADD COLUMN claimed_at timestamptz;

UPDATE webhook.subscription_streams stream
SET claimed_by = claim.claimed_by, claimed_at = claim.claimed_at
FROM webhook.subscription_claims claim
WHERE claim.subscription_id = stream.subscription_id;

CREATE OR REPLACE VIEW webhook.pending_work AS
  SELECT s.id AS subscription_id, s.criteria, s.endpoint, s.status,
         'notification' AS work,
         count(*) AS items,
         count(*) FILTER (WHERE stream.claimed_by IS NULL AND coalesce(e.not_before, '-infinity') <= now()) AS waiting,
         count(*) FILTER (WHERE stream.claimed_by IS NULL AND e.not_before > now()) AS scheduled,
         count(*) FILTER (WHERE stream.claimed_by IS NOT NULL) AS sending,
         min(e.written_at) FILTER (WHERE coalesce(e.not_before, '-infinity') <= now()) AS waiting_since,
         min(e.not_before) FILTER (WHERE e.not_before > now()) AS next_run_at,
         max(e.attempts) AS most_attempts,
         NULL::text AS last_job_error
  FROM webhook.pending_events pending
  JOIN webhook.subscription_events e ON e.id = pending.event_id
  LEFT JOIN webhook.subscriptions s ON s.id = e.subscription_id
  LEFT JOIN webhook.subscription_streams stream ON stream.subscription_id = e.subscription_id
  GROUP BY s.id, s.criteria, s.endpoint, s.status
  UNION ALL
  SELECT s.id, s.criteria, s.endpoint, s.status,
         job.task_identifier,
         count(*),
         count(*) FILTER (WHERE job.locked_at IS NULL AND job.run_at <= now()),
         count(*) FILTER (WHERE job.locked_at IS NULL AND job.run_at > now()),
         count(*) FILTER (WHERE job.locked_at IS NOT NULL),
         min(job.run_at) FILTER (WHERE job.locked_at IS NULL AND job.run_at <= now()),
         min(job.run_at) FILTER (WHERE job.locked_at IS NULL AND job.run_at > now()),
         max(job.attempts),
         (array_agg(job.last_error ORDER BY job.updated_at DESC) FILTER (WHERE job.last_error IS NOT NULL))[1]
  FROM graphile_worker.jobs job
  LEFT JOIN webhook.subscriptions s ON s.id::text = substring(job.key FROM '^(?:handshake|reactivate):(.*)$')
  GROUP BY s.id, s.criteria, s.endpoint, s.status, job.task_identifier;

DROP TABLE webhook.subscription_claims;

COMMENT ON TABLE webhook.subscription_streams IS
  'Per subscription: the number of its last numbered event, and the worker process sending its events now (claimed_by; NULL when none).';
COMMENT ON COLUMN webhook.worker_pools.kind IS
  'graphile-worker: a graphile-worker pool (its id is what its jobs hold in locked_by); event-sender: a process sending subscription events (what webhook.subscription_streams.claimed_by holds); websocket-server: an API process holding websocket clients (what webhook.websocket_bindings.server_id holds).';
