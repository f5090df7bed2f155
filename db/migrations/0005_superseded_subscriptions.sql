-- Up Migration

-- A subscription is superseded once a newer subscription exists for the same
-- criteria string: the client has replaced it (switch off, create anew; or a
-- new one after it went to `error`). A superseded subscription in `error` is
-- never called again, whatever becomes of its successor: no event enqueues its
-- reactivation handshake (before this, every matching write sent one to the
-- old endpoint), and the reactivation task checks again before calling and
-- before reactivating (src/subscriptions/state.ts). So of a criteria's
-- subscriptions only the newest can be reactivated. A superseded subscription
-- stays in `error` until its criteria is switched off, which ends it too.

CREATE INDEX subscriptions_by_criteria_and_creation ON webhook.subscriptions (criteria, created_at);

CREATE FUNCTION webhook.subscription_is_superseded(subscription_id uuid) RETURNS boolean
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN EXISTS (
    SELECT 1
    FROM webhook.subscriptions this
    JOIN webhook.subscriptions newer ON newer.criteria = this.criteria AND newer.created_at > this.created_at
    WHERE this.id = subscription_is_superseded.subscription_id);

-- As in 0003_notification_triggers.sql, but for the last condition. The jobs'
-- task names and payloads are the job contract of src/db/jobs.ts.
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

-- Down Migration

COMMENT ON FUNCTION webhook.event_payload(uuid, text, text, integer, boolean) IS NULL;

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
  ));
  RETURN NULL;
END
$$;

DROP FUNCTION webhook.subscription_is_superseded(uuid);
DROP INDEX webhook.subscriptions_by_criteria_and_creation;
