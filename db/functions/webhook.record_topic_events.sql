-- The notification trigger of topic-based subscriptions: every statement on
-- fhir.resources records, in the writing transaction, an event for each
-- (active topic-based subscription, written version) its topic fires on, as
-- webhook.record_subscription_events does for classic criteria. Whoever
-- writes, API or a loader's plain SQL, alike: an UPDATE of 10,000 Encounters
-- to finished notifies exactly those whose previous version was not.
--
-- A subscription's topic fires when one of its resourceTriggers on the
-- written type and interaction fires (webhook.topic_trigger_fires), and the
-- resource passes the subscription's filters for that type (topic_filter):
-- the version written, or for a delete the last one. Set-based: the active
-- subscriptions' triggers for the statement's types and interaction are
-- read once, then joined with the written rows; a statement that no topic
-- triggers on costs one probe of subscriptions_by_topic.
--
-- The previous version of an update is read from fhir.resource_history (the
-- version before, by primary key), and only when a topic could fire: an OLD
-- TABLE would make every UPDATE keep a copy of its old rows, used or not. A
-- create has no previous version, a delete no current one (the deletion is
-- recorded as the next version, deleted, as for classic criteria).
--
-- A subscription in error (and not superseded by a newer one on the same
-- topic and filters) that its topic fires for gets one
-- subscription_reactivation job, as for classic criteria: the handshake
-- again, and this event delivered if it passes. Its events are recorded all
-- the same (the Backport IG: events-since-subscription-start goes on in
-- error), abandoned: not sent, numbered later (webhook.number_missed_events),
-- so that the subscriber sees the gap in the numbers and $events serves them.
--
-- A trigger's FHIRPath criteria (compiled to SQL by src/fhirpath/) must hold
-- as well: webhook.fhirpath_criteria_hold decides it, in this statement, on
-- the same versions (webhook.define_fhirpath_criteria says how).
--
-- Wake-up as the classic trigger: one NOTIFY when something was recorded
-- (PostgreSQL sends one for the two triggers of a transaction).

CREATE OR REPLACE FUNCTION webhook.record_topic_events() RETURNS trigger
  LANGUAGE plpgsql
  SET jit = off
  AS $$
DECLARE
  interaction text := CASE TG_OP WHEN 'INSERT' THEN 'create' WHEN 'UPDATE' THEN 'update' ELSE 'delete' END;
  recorded bigint;
  reactivations graphile_worker.job_spec[];
BEGIN
  IF NOT EXISTS (SELECT FROM webhook.subscriptions s WHERE s.topic_id IS NOT NULL AND s.status IN ('active', 'error')) THEN
    RETURN NULL;
  END IF;

  WITH triggers AS MATERIALIZED (
    SELECT s.id AS subscription_id, s.status, trigger, trigger ->> 'resourceType' AS resource_type,
           -- One in error that keeps failing waits before an event may reactivate it (migration 0025).
           s.status = 'error' AND coalesce(s.reactivation_not_before <= now(), true) AS may_reactivate,
           (s.topic_filter ->> (trigger ->> 'resourceType'))::jsonpath AS filter,
           -- Its FHIRPath criteria's name in webhook.fhirpath_criteria_hold, once per trigger (NULL: it has none).
           CASE WHEN jsonb_typeof(trigger -> 'fhirPath') = 'object' THEN md5(trigger #>> '{fhirPath,sql}') END AS fhirpath_criteria
    FROM webhook.subscriptions s
    JOIN webhook.subscription_topics topic ON topic.id = s.topic_id
    CROSS JOIN LATERAL jsonb_array_elements(topic.compiled -> 'triggers') AS trigger
    WHERE s.topic_id IS NOT NULL AND s.status IN ('active', 'error')
      -- A subscription in error superseded by a newer one is never reactivated: left out once, here.
      AND (s.status = 'active' OR NOT webhook.subscription_is_superseded(s.id))
      AND trigger -> 'interactions' ? interaction
      AND trigger ->> 'resourceType' IN (SELECT DISTINCT resource_type FROM changed_rows)
  ), writes AS (
    SELECT c.resource_type, c.id, c.version_id AS row_version_id,
           CASE interaction WHEN 'delete' THEN c.version_id + 1 ELSE c.version_id END AS version_id,
           CASE interaction WHEN 'create' THEN NULL WHEN 'delete' THEN c.content ELSE before.content END AS previous,
           CASE interaction WHEN 'delete' THEN NULL ELSE c.content END AS current
    FROM changed_rows c
    LEFT JOIN fhir.resource_history before
      ON interaction = 'update' AND before.resource_type = c.resource_type AND before.id = c.id AND before.version_id = c.version_id - 1
    WHERE c.resource_type IN (SELECT resource_type FROM triggers)
  ), fired AS MATERIALIZED (
    SELECT DISTINCT triggers.subscription_id, triggers.status, triggers.may_reactivate, writes.resource_type, writes.id, writes.version_id, writes.row_version_id
    FROM triggers
    JOIN writes ON writes.resource_type = triggers.resource_type
    WHERE webhook.topic_trigger_fires(triggers.trigger, interaction, writes.previous, writes.current)
      AND (triggers.fhirpath_criteria IS NULL OR webhook.fhirpath_criteria_hold(triggers.fhirpath_criteria, writes.previous, writes.current))
      AND webhook.notifies(writes.resource_type, coalesce(writes.current, writes.previous), triggers.filter)
  ), inserted AS (
    INSERT INTO webhook.subscription_events (subscription_id, resource_type, resource_id, version_id, deleted)
    SELECT subscription_id, resource_type, id, version_id, interaction = 'delete'
    FROM fired
    WHERE status = 'active'
    -- A statement's rows in a stable order: a subscription is sent them in it.
    ORDER BY 1, 2, 3
    RETURNING 1
  ), missed AS (
    -- A subscription in error misses its events: they are recorded
    -- abandoned, to be numbered when it is reactivated or asked for its
    -- status (webhook.number_missed_events), so that its subscriber sees the
    -- gap and $events serves them. No lock: a subscription in error never
    -- holds up the writers.
    INSERT INTO webhook.subscription_events (subscription_id, resource_type, resource_id, version_id, deleted, status, settled_at)
    SELECT subscription_id, resource_type, id, version_id, interaction = 'delete', 'abandoned', now()
    FROM fired
    WHERE status = 'error'
    ORDER BY 1, 2, 3
  )
  SELECT (SELECT count(*) FROM inserted),
         -- A subscription in error that its topic fires for is reactivated by its first such event, as a classic one is.
         array(SELECT DISTINCT ON (f.subscription_id)
                      ('subscription_reactivation', webhook.event_payload(f.subscription_id, f.resource_type, f.id, f.row_version_id, interaction = 'delete'),
                       NULL, NULL, NULL, 'reactivate:' || f.subscription_id, NULL, NULL)::graphile_worker.job_spec
               FROM fired f
               WHERE f.may_reactivate
               ORDER BY f.subscription_id, f.resource_type, f.id)
  INTO recorded, reactivations;

  -- add_jobs notifies graphile-worker's workers even of no job: only when there is one.
  IF cardinality(reactivations) > 0 THEN
    PERFORM graphile_worker.add_jobs(reactivations);
  END IF;
  IF recorded > 0 THEN
    PERFORM pg_notify('webhook_subscription_events', '');
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER resources_record_topic_events_on_insert
  AFTER INSERT ON fhir.resources
  REFERENCING NEW TABLE AS changed_rows
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.record_topic_events();

CREATE OR REPLACE TRIGGER resources_record_topic_events_on_update
  AFTER UPDATE ON fhir.resources
  REFERENCING NEW TABLE AS changed_rows
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.record_topic_events();

CREATE OR REPLACE TRIGGER resources_record_topic_events_on_delete
  AFTER DELETE ON fhir.resources
  REFERENCING OLD TABLE AS changed_rows
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.record_topic_events();
