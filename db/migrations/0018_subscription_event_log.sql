-- Up Migration

-- Notifications move from graphile-worker's queue to an event log of our own.
--
-- Before this, each statement on fhir.resources enqueued graphile-worker jobs
-- in one named queue per subscription ('subscription:<id>'), and the service
-- read, wrote and triggered on graphile-worker's private tables to batch them
-- (0008, 0014, 0016). Measured from outside, that capped a subscription near
-- 0.4× graphile-worker's raw rate: each fetch locks every queue that has work,
-- a write matching 1,000 subscriptions made 1,000 jobs in 1,000 queues, and
-- every job insert and queue unlock sent a NOTIFY, whose database-wide lock
-- at commit serialises the committing transactions. It also meant that the
-- next release of graphile-worker could silently stop every delivery.
--
-- Now:
--   * the trigger on fhir.resources writes one row per (active subscription,
--     matching resource version) into webhook.subscription_events, in the
--     writing transaction: a committed write always has its events, a rolled
--     back one never (db/functions/webhook.record_subscription_events.sql);
--   * workers claim the due events of several subscriptions in one statement
--     (db/functions/webhook.claim_subscription_events.sql), one claim per
--     subscription at a time (webhook.subscription_streams), and number
--     each subscription's events as they first send them: 1, 2, 3, … with no
--     gap, kept across retries (the Subscriptions Backport's
--     eventsSinceSubscriptionStart);
--   * graphile-worker keeps the handshakes, reactivations, alert e-mails and
--     the daily cleanup, used through its public API only (add_job, add_jobs,
--     force_unlock_workers, the graphile_worker.jobs view).
--
-- Functions and triggers now live one per file in db/functions/, applied after
-- the migrations (src/db/migrations.ts); this migration drops those that go.
-- Notification jobs left in the queue by the version before (waiting, running
-- or scheduled retries) are moved into the log by the notification_delivery
-- task when graphile-worker runs them (src/dispatch/tasks/legacy-notification.ts):
-- graphile-worker gives a job's payload to its task and to no public view.

-- The events: what each subscription is to be told, and what became of it.
CREATE TABLE webhook.subscription_events (
  -- Log order: a subscription's events are claimed and numbered in this order.
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  -- No foreign key: checking one costs the writer a lookup per row, and a
  -- batch loader writes tens of thousands. A claim abandons the events of a
  -- subscription that is no longer active, or no longer exists.
  subscription_id uuid NOT NULL,
  resource_type text NOT NULL,
  resource_id text NOT NULL,
  -- The version that made the event: for a deletion, the deletion's own
  -- version, as fhir.resource_history records it.
  version_id integer NOT NULL CHECK (version_id >= 1),
  deleted boolean NOT NULL,
  -- When the writing transaction started: a delivery's latency is measured
  -- from the version's lastUpdated, this is for retention and for DBAs.
  written_at timestamptz NOT NULL DEFAULT now(),
  -- 1, 2, 3, … per subscription, in the order the subscription is first sent
  -- its events; NULL until then (and for events never sent).
  event_number bigint CHECK (event_number >= 1),
  -- Calls made for this event so far.
  attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  -- A retry waits until then; NULL: due now.
  not_before timestamptz,
  --   pending     to send (again)
  --   delivered   its subscriber answered 2xx
  --   failed      refused for good, or its last attempt failed
  --   superseded  not sent: the subscriber was sent a newer version of the resource
  --   abandoned   not sent: its subscription left `active` (missed events are not replayed)
  --   gone        not sent: the resource version no longer exists
  status text NOT NULL DEFAULT 'pending'
    CHECK (status IN ('pending', 'delivered', 'failed', 'superseded', 'abandoned', 'gone')),
  settled_at timestamptz,
  CONSTRAINT subscription_events_settled_when_not_pending CHECK ((status = 'pending') = (settled_at IS NULL)),
  CONSTRAINT subscription_events_numbered_once UNIQUE (subscription_id, event_number)
);

COMMENT ON TABLE webhook.subscription_events IS
  'One row per (subscription, resource version) the notification trigger matched, written in the writing transaction; workers send them and record here what became of each. Settled rows are kept DELIVERY_LOG_RETENTION_DAYS days.';
COMMENT ON COLUMN webhook.subscription_events.event_number IS
  'The subscription''s event number (eventsSinceSubscriptionStart): gapless from 1 in the order its events are first sent, kept across retries; NULL until first sent.';

-- What the claims look for: the pending events of each subscription, in log
-- order. Small however long the log: settled rows leave it.
CREATE INDEX subscription_events_pending ON webhook.subscription_events (subscription_id, id) WHERE status = 'pending';
-- Retention deletes settled rows by age.
CREATE INDEX subscription_events_by_settling ON webhook.subscription_events (settled_at) WHERE status <> 'pending';

-- One row per subscription: its numbering, and which worker is sending its events now.
CREATE TABLE webhook.subscription_streams (
  subscription_id uuid PRIMARY KEY REFERENCES webhook.subscriptions ON DELETE CASCADE,
  -- The number of the subscription's last numbered event: its events since start.
  last_event_number bigint NOT NULL DEFAULT 0 CHECK (last_event_number >= 0),
  -- The worker process sending its events (one at a time: order per resource,
  -- DELIVERY_PARALLEL_CALLS), or NULL. A process that dies is dropped from
  -- webhook.worker_pools by the others, which frees its claims.
  claimed_by text REFERENCES webhook.worker_pools (pool_id) ON DELETE SET NULL,
  -- Since when (meaningful while claimed_by is set).
  claimed_at timestamptz
);

COMMENT ON TABLE webhook.subscription_streams IS
  'Per subscription: the number of its last numbered event, and the worker process sending its events now (claimed_by; NULL when none).';

-- Streams for the subscriptions that exist; new ones get theirs with them
-- (db/functions/webhook.create_subscription_stream.sql).
INSERT INTO webhook.subscription_streams (subscription_id) SELECT id FROM webhook.subscriptions;

-- Event numbers are stored with the calls too.
ALTER TABLE webhook.delivery_attempts ADD COLUMN event_number bigint;
COMMENT ON COLUMN webhook.delivery_attempts.event_number IS
  'For a notification: the subscription''s number of the event it sent (webhook.subscription_events.event_number).';

-- webhook.worker_pools now lists worker processes of two kinds: graphile-worker
-- pools (whose jobs are freed with force_unlock_workers when they die) and the
-- event senders (whose claims are freed by the foreign key above).
ALTER TABLE webhook.worker_pools ADD COLUMN kind text NOT NULL DEFAULT 'graphile-worker'
  CHECK (kind IN ('graphile-worker', 'event-sender'));
COMMENT ON COLUMN webhook.worker_pools.kind IS
  'graphile-worker: a graphile-worker pool (its id is what its jobs hold in locked_by); event-sender: a process sending subscription events (what webhook.subscription_streams.claimed_by holds).';

-- Which text of each file of db/functions/ was last applied: a file is
-- applied again only when its text changes (src/db/migrations.ts), so that a
-- restart does not lock busy tables (CREATE OR REPLACE TRIGGER does) for nothing.
CREATE TABLE webhook.applied_functions (
  file text PRIMARY KEY,
  sha256 text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  applied_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE webhook.applied_functions IS
  'The files of db/functions/ applied to this database, with the SHA-256 of the text applied.';

-- What goes: the wake-up trigger and the batching on graphile-worker's
-- private tables, and the payload builders of the old jobs.
-- (Found by name: a new database never had the trigger or the two functions
-- that used graphile-worker's private tables, see 0008 and 0014.)
DO $$
DECLARE
  queues regclass := (SELECT tgrelid::regclass FROM pg_trigger WHERE tgname = 'job_queue_unlocked_wakes_workers');
BEGIN
  IF queues IS NOT NULL THEN
    EXECUTE format('DROP TRIGGER job_queue_unlocked_wakes_workers ON %s', queues);
  END IF;
END
$$;
DROP FUNCTION webhook.wake_workers();
DROP FUNCTION IF EXISTS webhook.take_waiting_notifications(bigint, integer);
DROP FUNCTION IF EXISTS webhook.release_stranded_jobs(text, bigint[]);
DROP FUNCTION webhook.batch_event(text, text, integer, boolean);
-- Returns the pools it freed, with their kind, from now on.
DROP FUNCTION webhook.release_jobs_of_dead_worker_pools();

-- The trigger function is renamed for what it does now: it records events.
DROP TRIGGER resources_enqueue_notifications_on_insert ON fhir.resources;
DROP TRIGGER resources_enqueue_notifications_on_update ON fhir.resources;
DROP TRIGGER resources_enqueue_notifications_on_delete ON fhir.resources;
DROP FUNCTION webhook.enqueue_notifications();

-- The DBA view of pending work, on the log and graphile-worker's public view.
DROP VIEW webhook.pending_work;
CREATE VIEW webhook.pending_work AS
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
  FROM webhook.subscription_events e
  LEFT JOIN webhook.subscriptions s ON s.id = e.subscription_id
  LEFT JOIN webhook.subscription_streams stream ON stream.subscription_id = e.subscription_id
  WHERE e.status = 'pending'
  GROUP BY s.id, s.criteria, s.endpoint, s.status
  UNION ALL
  -- graphile-worker's jobs: handshakes (job key handshake:<id>), reactivations
  -- (reactivate:<id>), alert e-mails and the daily cleanup (no subscription).
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
  -- Compared as text: a job key is never cast, so no key can break the view.
  LEFT JOIN webhook.subscriptions s ON s.id::text = substring(job.key FROM '^(?:handshake|reactivate):(.*)$')
  GROUP BY s.id, s.criteria, s.endpoint, s.status, job.task_identifier;

COMMENT ON VIEW webhook.pending_work IS
  'Work not done yet, per subscription: its pending notification events (work = notification) and its graphile-worker jobs (work = the task): waiting (due, not taken), scheduled (due later: retries), sending or running (taken by a worker), since when the oldest waits, the most attempts made.';

-- Down Migration

-- Not reversible: the functions of the version before live in its migrations,
-- and the events in the log have no graphile-worker job to go back to.
DO $$
BEGIN
  RAISE EXCEPTION 'migration 0018 (the subscription event log) cannot be undone: restore a backup taken before it';
END
$$;
