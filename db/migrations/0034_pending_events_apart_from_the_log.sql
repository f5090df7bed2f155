-- Up Migration

-- Issue 35, item 5: a hot path that does not depend on vacuum.
--
-- Until now the claims found the pending events through a partial index of
-- the log (subscription_events_pending: status = 'pending'). Each event left
-- two entries there (as recorded, as numbered at its claim) that its
-- settlement made dead, and an index scan can drop a dead entry only once no
-- snapshot may still see its row. While a long transaction holds a snapshot
-- (a DBA's hour-long report, a batch loader's transaction) or vacuum lags,
-- every probe of the claim walks every entry every event left since: the
-- scan and the claim grew from 1 ms to 20 ms over 20,000 events, and a
-- 40-minute soak's p99 grew 4.5 to 13.6 times (docs/performance.md).
--
-- The pending events now have a table of their own, kept in step with the
-- log's status by triggers (db/functions/webhook.keep_pending_events_in_step.sql),
-- and split in two partitions, the generations: new rows go to the current
-- one; every few seconds webhook.rotate_pending_events moves the few rows
-- still pending from the other into the current, TRUNCATEs the other and
-- makes it current. A TRUNCATE leaves nothing behind whatever snapshots are
-- held, so the dead entries in the claim's path are those of the last
-- seconds, not of the last hour. The log keeps every event and what became
-- of it, as before: the DBA views, $events and resend read it.
CREATE TABLE webhook.pending_events (
  generation smallint NOT NULL,
  subscription_id uuid NOT NULL,
  event_id bigint NOT NULL
) PARTITION BY LIST (generation);

CREATE TABLE webhook.pending_events_0 PARTITION OF webhook.pending_events FOR VALUES IN (0);
CREATE TABLE webhook.pending_events_1 PARTITION OF webhook.pending_events FOR VALUES IN (1);

-- The claim's scan (each subscription's oldest pending event) and its probes
-- (a subscription's next events in log order) read this index.
CREATE INDEX pending_events_by_subscription ON webhook.pending_events (subscription_id, event_id);

COMMENT ON TABLE webhook.pending_events IS
  'The events of webhook.subscription_events whose status is pending, as (subscription, event): the claims'' working set, kept in step by triggers. A partition per generation, one truncated every few seconds (webhook.rotate_pending_events): a TRUNCATE leaves no dead rows, whatever snapshots are held. Not a history: read the log.';
COMMENT ON COLUMN webhook.pending_events.generation IS
  'The partition: the current generation (webhook.pending_events_generation) when the event became pending, or when a rotation moved it.';

-- Which generation takes new rows, and when the last rotation was: one row.
CREATE TABLE webhook.pending_events_generation (
  current_generation smallint NOT NULL CHECK (current_generation IN (0, 1)),
  rotated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX pending_events_generation_one_row ON webhook.pending_events_generation ((true));
INSERT INTO webhook.pending_events_generation (current_generation) VALUES (0);

COMMENT ON TABLE webhook.pending_events_generation IS
  'One row: the generation (partition of webhook.pending_events) that takes new pending events, and when webhook.rotate_pending_events last truncated the other.';

-- The pending set is filled from the log by the triggers' file, once they
-- exist (no event recorded meanwhile is missed): db/functions are applied
-- after the migrations.

-- The DBA view of pending work reads the pending set (the log has no index
-- of its pending events any more), each event's row found by key; its
-- columns and meaning are unchanged.
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

-- The log's partial index of pending events is read by nothing now; without
-- it each event is two index entries fewer to write.
DROP INDEX webhook.subscription_events_pending;

-- Down Migration

-- Not reversible here: the claim functions of the version before (db/functions
-- as they were) read the index dropped above and would have to be applied
-- again with it.
DO $$
BEGIN
  RAISE EXCEPTION 'migration 0034 (pending events apart from the log) cannot be undone: restore a backup taken before it';
END
$$;
