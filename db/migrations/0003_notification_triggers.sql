-- Up Migration

-- Notifications are enqueued by the database, in the writing transaction.
--
-- Statement-level triggers on fhir.resources match every row a statement
-- wrote against the subscriptions of its type and enqueue all the jobs with
-- ONE call to graphile_worker.add_jobs: a 20,000-row COPY costs one set-based
-- query, not 20,000 add_job calls. A write that commits has its jobs; a write
-- that rolls back has none. API writes and a loader's plain SQL are alike.
--
-- Jobs (the dispatcher's graphile-worker tasks run them):
--   notification_delivery      one per (active subscription, matching resource version)
--   subscription_reactivation  for a subscription in `error` that a matching event
--                              reaches; its job key keeps one pending per subscription
-- Payload: {"subscriptionId", "resourceType", "resourceId", "versionId", "deleted"},
-- versionId being the version that made the event (for a deletion, the
-- deletion's own version, as fhir.resource_history records it).
--
-- Matching: `match` for creations and updates, `match_deleted` for deletions
-- (the spec evaluates only active, status and :missing there); NULL matches
-- all. Of Bundles, only documents notify (spec Events rule 4).
--
-- Subscriptions drive the join (LATERAL ... OFFSET 0 keeps that order): each
-- subscription's jsonpath then runs over all rows in turn and its compiled
-- regular expressions stay in PostgreSQL's small per-connection cache.

CREATE FUNCTION webhook.enqueue_notifications() RETURNS trigger
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

-- Whether a written (or deleted) resource notifies a subscription with this predicate.
-- Silent: a predicate that errs on some odd content does not match it, and
-- never makes the write itself fail.
CREATE FUNCTION webhook.notifies(resource_type text, content jsonb, predicate jsonpath) RETURNS boolean
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN (resource_type <> 'Bundle' OR content ->> 'type' = 'document')
     AND (predicate IS NULL OR coalesce(jsonb_path_match(content, predicate, '{}', true), false));

-- STABLE like json_build_object, so that it is inlined into the trigger's query.
CREATE FUNCTION webhook.event_payload(subscription_id uuid, resource_type text, id text, version_id integer, deleted boolean)
  RETURNS json
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN json_build_object(
    'subscriptionId', subscription_id,
    'resourceType', resource_type,
    'resourceId', id,
    -- The deleted row holds its last version; the deletion is the next one.
    'versionId', CASE WHEN deleted THEN version_id + 1 ELSE version_id END,
    'deleted', deleted);

-- The same transition-table name for all three, so one function serves them.
CREATE TRIGGER resources_enqueue_notifications_on_insert
  AFTER INSERT ON fhir.resources
  REFERENCING NEW TABLE AS changed_rows
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.enqueue_notifications();

CREATE TRIGGER resources_enqueue_notifications_on_update
  AFTER UPDATE ON fhir.resources
  REFERENCING NEW TABLE AS changed_rows
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.enqueue_notifications();

CREATE TRIGGER resources_enqueue_notifications_on_delete
  AFTER DELETE ON fhir.resources
  REFERENCING OLD TABLE AS changed_rows
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.enqueue_notifications();

-- Down Migration

DROP TRIGGER resources_enqueue_notifications_on_delete ON fhir.resources;
DROP TRIGGER resources_enqueue_notifications_on_update ON fhir.resources;
DROP TRIGGER resources_enqueue_notifications_on_insert ON fhir.resources;
DROP FUNCTION webhook.enqueue_notifications();
DROP FUNCTION webhook.notifies(text, jsonb, jsonpath);
DROP FUNCTION webhook.event_payload(uuid, text, text, integer, boolean);
