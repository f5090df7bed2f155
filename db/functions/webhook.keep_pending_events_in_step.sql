-- webhook.pending_events holds exactly the events of the log whose status is
-- pending (migration 0034 says why it is a table of its own). Kept in step
-- here, in the transaction that changes the log, whoever changes it: the
-- notification triggers, a sender's settlement, resend, abandonment, a DBA.
--   INSERT (once per statement: a write matching a thousand subscriptions
--     records a thousand events in one statement): the pending ones, into the
--     current generation.
--   UPDATE of status, only when it changes (once per row: numbering and
--     retries leave status as it is and fire nothing): out when an event is
--     settled, in again when it is pending again (resend, a reopened event).
--   DELETE of a pending event (the daily cleanup deletes settled ones only): out.
--   TRUNCATE of the log: the pending set too.

CREATE OR REPLACE FUNCTION webhook.keep_pending_events_in_step() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    TRUNCATE webhook.pending_events;
  ELSIF TG_OP = 'INSERT' THEN
    INSERT INTO webhook.pending_events (generation, subscription_id, event_id)
    SELECT (SELECT current_generation FROM webhook.pending_events_generation), recorded.subscription_id, recorded.id
    FROM recorded
    WHERE recorded.status = 'pending';
  ELSIF TG_OP = 'UPDATE' AND NEW.status = 'pending' THEN
    INSERT INTO webhook.pending_events (generation, subscription_id, event_id)
    SELECT current_generation, NEW.subscription_id, NEW.id FROM webhook.pending_events_generation;
  ELSE
    DELETE FROM webhook.pending_events WHERE subscription_id = OLD.subscription_id AND event_id = OLD.id;
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER subscription_events_pending_on_insert
  AFTER INSERT ON webhook.subscription_events
  REFERENCING NEW TABLE AS recorded
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.keep_pending_events_in_step();

CREATE OR REPLACE TRIGGER subscription_events_pending_on_update
  AFTER UPDATE OF status ON webhook.subscription_events
  FOR EACH ROW WHEN ((OLD.status = 'pending') <> (NEW.status = 'pending'))
  EXECUTE FUNCTION webhook.keep_pending_events_in_step();

CREATE OR REPLACE TRIGGER subscription_events_pending_on_delete
  AFTER DELETE ON webhook.subscription_events
  FOR EACH ROW WHEN (OLD.status = 'pending')
  EXECUTE FUNCTION webhook.keep_pending_events_in_step();

CREATE OR REPLACE TRIGGER subscription_events_pending_on_truncate
  AFTER TRUNCATE ON webhook.subscription_events
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.keep_pending_events_in_step();

-- In step from the start, and again whenever this file is applied: the
-- triggers above now hold the log's lock (CREATE TRIGGER takes SHARE ROW
-- EXCLUSIVE, which waits for the writers in flight and holds back new ones
-- until this file's transaction ends), so no event recorded or settled
-- between the migration and now is missed. A scan of the log, at an upgrade.
DELETE FROM webhook.pending_events pending
WHERE NOT EXISTS (SELECT FROM webhook.subscription_events e WHERE e.id = pending.event_id AND e.status = 'pending');

INSERT INTO webhook.pending_events (generation, subscription_id, event_id)
SELECT (SELECT current_generation FROM webhook.pending_events_generation), e.subscription_id, e.id
FROM webhook.subscription_events e
WHERE e.status = 'pending'
  AND NOT EXISTS (SELECT FROM webhook.pending_events pending WHERE pending.subscription_id = e.subscription_id AND pending.event_id = e.id);
