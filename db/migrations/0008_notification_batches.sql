-- Up Migration

-- Notifications are enqueued in batches, one queue per subscription.
--
-- Before this, a statement writing 20,000 matching rows enqueued 20,000
-- notification_delivery jobs: 20,000 job fetches, subscription reads, version
-- reads, attempt inserts and completions. Now it enqueues one job per active
-- subscription per chunk of up to 100 of the statement's matching rows, so
-- each of those costs is paid once per batch. A single-row write still makes
-- a job of one event: its latency is unchanged.
--
-- Each job goes to its subscription's named graphile-worker queue,
-- 'subscription:<id>' (notificationQueue in src/db/jobs.ts), whose jobs run
-- one at a time, in order:
--   * one subscriber never has more calls in flight than one batch makes
--     (DELIVERY_PARALLEL_CALLS);
--   * subscribers that hang hold one worker slot each, not every slot;
--   * a statement lists a resource once, so two versions of a resource are in
--     two jobs of the queue, sent in version order (a retry, run later, is
--     the exception).
--
-- Payload (notificationBatch in src/db/jobs.ts; test/notification-triggers.test.ts
-- checks that the two agree):
--   {"subscriptionId", "events": [{"resourceType", "resourceId", "versionId", "deleted"}, ...]}
-- Reactivations are unchanged (0005_superseded_subscriptions.sql).
--
-- Single-row writes make jobs of one event each, and a queue runs one job at
-- a time: at 100 writes/s a subscription would be capped by one job's round
-- trips. So a starting job takes the notification jobs waiting behind it in
-- its queue (webhook.take_waiting_notifications, called by the task): under
-- load batches grow by themselves, idle a single event goes at once.
--
-- A worker that looks for a job while a queue's last job is finishing finds
-- the queue locked and sleeps until its next poll (2 s): graphile-worker tells
-- its workers of new jobs (NOTIFY "jobs:insert"), not of a queue unlocked. The
-- trigger on its queue table below does, so that a subscription's next batch
-- starts as soon as the one before is complete.

CREATE FUNCTION webhook.batch_event(resource_type text, id text, version_id integer, deleted boolean)
  RETURNS json
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN json_build_object(
    'resourceType', resource_type,
    'resourceId', id,
    -- The deleted row holds its last version; the deletion is the next one.
    'versionId', CASE WHEN deleted THEN version_id + 1 ELSE version_id END,
    'deleted', deleted);

COMMENT ON FUNCTION webhook.batch_event(text, text, integer, boolean) IS
  'One event of a notification_delivery batch: batchEvent in src/db/jobs.ts.';

CREATE OR REPLACE FUNCTION webhook.enqueue_notifications() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  deleting boolean := TG_OP = 'DELETE';
  batch_size CONSTANT integer := 100;
BEGIN
  PERFORM graphile_worker.add_jobs(array(
    SELECT ('notification_delivery',
            json_build_object('subscriptionId', batch.subscription_id, 'events', batch.events),
            'subscription:' || batch.subscription_id,
            NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
    FROM (
      SELECT matched.subscription_id, json_agg(matched.event ORDER BY matched.n) AS events
      FROM (
        SELECT s.id AS subscription_id, event.event,
               row_number() OVER (PARTITION BY s.id ORDER BY event.resource_type, event.id) AS n
        FROM webhook.subscriptions s
        CROSS JOIN LATERAL (
          SELECT c.resource_type, c.id, webhook.batch_event(c.resource_type, c.id, c.version_id, deleting) AS event
          FROM changed_rows c
          WHERE c.resource_type = s.resource_type
            AND webhook.notifies(c.resource_type, c.content, CASE WHEN deleting THEN s.match_deleted ELSE s.match END)
          OFFSET 0
        ) event
        WHERE s.status = 'active'
      ) matched
      GROUP BY matched.subscription_id, (matched.n - 1) / batch_size
    ) batch
    UNION ALL
    SELECT ('subscription_reactivation', event.payload, NULL, NULL, NULL, 'reactivate:' || s.id, NULL, NULL)::graphile_worker.job_spec
    FROM webhook.subscriptions s
    CROSS JOIN LATERAL (
      SELECT webhook.event_payload(s.id, c.resource_type, c.id, c.version_id, deleting) AS payload
      FROM changed_rows c
      WHERE c.resource_type = s.resource_type
        AND webhook.notifies(c.resource_type, c.content, CASE WHEN deleting THEN s.match_deleted ELSE s.match END)
      LIMIT 1
    ) event
    WHERE s.status = 'error'
      AND NOT webhook.subscription_is_superseded(s.id)
  ));
  RETURN NULL;
END
$$;

CREATE FUNCTION webhook.wake_workers() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  -- As graphile_worker.add_job announces one new job: one worker of each pool looks.
  PERFORM pg_notify('jobs:insert', '{"count":1}');
  RETURN NULL;
END
$$;

-- (Rewritten with migration 0018. As first written, this migration also
-- created a trigger on graphile-worker's private job-queue table that
-- called webhook.wake_workers() when a queue was unlocked, and
-- webhook.take_waiting_notifications(), which moved waiting jobs' events into
-- a starting job by rewriting graphile-worker's private jobs table. A
-- migration must not depend on another library's private schema, which its
-- next release may change: a new database would fail here. Databases migrated
-- before keep those objects until 0018 drops them; a new database never has
-- them.)

COMMENT ON FUNCTION webhook.event_payload(uuid, text, text, integer, boolean) IS
  'The payload of subscription_reactivation jobs: resourceEvent in src/db/jobs.ts (test/notification-triggers.test.ts checks the two agree).';

-- Down Migration

DROP FUNCTION webhook.wake_workers();

-- 0005's function, which enqueues one job per event.
CREATE OR REPLACE FUNCTION webhook.enqueue_notifications() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  deleting boolean := TG_OP = 'DELETE';
BEGIN
  PERFORM graphile_worker.add_jobs(array(
    SELECT ('notification_delivery', event.payload, NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
    FROM webhook.subscriptions s
    CROSS JOIN LATERAL (
      SELECT webhook.event_payload(s.id, c.resource_type, c.id, c.version_id, deleting) AS payload
      FROM changed_rows c
      WHERE c.resource_type = s.resource_type
        AND webhook.notifies(c.resource_type, c.content, CASE WHEN deleting THEN s.match_deleted ELSE s.match END)
      OFFSET 0
    ) event
    WHERE s.status = 'active'
    UNION ALL
    SELECT ('subscription_reactivation', event.payload, NULL, NULL, NULL, 'reactivate:' || s.id, NULL, NULL)::graphile_worker.job_spec
    FROM webhook.subscriptions s
    CROSS JOIN LATERAL (
      SELECT webhook.event_payload(s.id, c.resource_type, c.id, c.version_id, deleting) AS payload
      FROM changed_rows c
      WHERE c.resource_type = s.resource_type
        AND webhook.notifies(c.resource_type, c.content, CASE WHEN deleting THEN s.match_deleted ELSE s.match END)
      LIMIT 1
    ) event
    WHERE s.status = 'error'
      AND NOT webhook.subscription_is_superseded(s.id)
  ));
  RETURN NULL;
END
$$;

COMMENT ON FUNCTION webhook.event_payload(uuid, text, text, integer, boolean) IS
  'The payload of notification_delivery and subscription_reactivation jobs: resourceEvent in src/db/jobs.ts (test/notification-triggers.test.ts checks the two agree).';

DROP FUNCTION webhook.batch_event(text, text, integer, boolean);
