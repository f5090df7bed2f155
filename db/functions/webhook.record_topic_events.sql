-- The notification trigger of topic-based subscriptions: every statement on
-- fhir.resources records, in the writing transaction, an event for each
-- (active topic-based subscription, written version) its topic fires on, as
-- webhook.record_subscription_events does for classic criteria. Whoever
-- writes, API or a loader's plain SQL, alike: an UPDATE of 10,000 Encounters
-- to finished notifies exactly those whose previous version was not.
--
-- The previous version of an update is read from fhir.resource_history (the
-- version before), and only when a topic-based subscription is active: an
-- OLD TABLE would make every UPDATE keep a copy of its old rows, used or not.
-- A create has no previous version, a delete no current one (the deletion is
-- recorded as the next version, deleted, as for classic criteria). Each written row is looked
-- up against the topic-based subscriptions (webhook.topic_triggered_subscriptions);
-- a statement that wrote no type any of them triggers on costs one probe.
-- Wake-up as the classic trigger: one NOTIFY when something was recorded
-- (PostgreSQL sends one for the two triggers of a transaction).

CREATE OR REPLACE FUNCTION webhook.record_topic_events() RETURNS trigger
  LANGUAGE plpgsql
  SET jit = off
  AS $$
DECLARE
  recorded bigint;
BEGIN
  IF NOT EXISTS (SELECT FROM webhook.subscriptions s WHERE s.topic_id IS NOT NULL AND s.status = 'active') THEN
    RETURN NULL;
  END IF;
  IF TG_OP = 'INSERT' THEN
    INSERT INTO webhook.subscription_events (subscription_id, resource_type, resource_id, version_id, deleted)
    SELECT fired, c.resource_type, c.id, c.version_id, false
    FROM changed_rows c
    CROSS JOIN LATERAL webhook.topic_triggered_subscriptions('create', c.resource_type, NULL, c.content) AS fired
    ORDER BY fired, c.resource_type, c.id;
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO webhook.subscription_events (subscription_id, resource_type, resource_id, version_id, deleted)
    SELECT fired, c.resource_type, c.id, c.version_id, false
    FROM changed_rows c
    JOIN fhir.resource_history p ON p.resource_type = c.resource_type AND p.id = c.id AND p.version_id = c.version_id - 1
    CROSS JOIN LATERAL webhook.topic_triggered_subscriptions('update', c.resource_type, p.content, c.content) AS fired
    ORDER BY fired, c.resource_type, c.id;
  ELSE
    INSERT INTO webhook.subscription_events (subscription_id, resource_type, resource_id, version_id, deleted)
    SELECT fired, c.resource_type, c.id, c.version_id + 1, true
    FROM changed_rows c
    CROSS JOIN LATERAL webhook.topic_triggered_subscriptions('delete', c.resource_type, c.content, NULL) AS fired
    ORDER BY fired, c.resource_type, c.id;
  END IF;
  GET DIAGNOSTICS recorded = ROW_COUNT;
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
