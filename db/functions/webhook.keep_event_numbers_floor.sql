-- A subscription's floor of event numbers (webhook.last_event_number),
-- raised when numbered events leave the log: deleted (retention, a DBA) or
-- truncated, so that its numbering goes on after them. Only a subscription
-- whose newest numbered event goes needs it; the floor never goes down.

CREATE OR REPLACE FUNCTION webhook.keep_event_numbers_floor() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    UPDATE webhook.subscription_streams stream
    SET last_event_number = numbered.last_given
    FROM (SELECT s.subscription_id, webhook.last_event_number(s.subscription_id) AS last_given
          FROM webhook.subscription_streams s) numbered
    WHERE stream.subscription_id = numbered.subscription_id AND numbered.last_given > stream.last_event_number;
  ELSE
    UPDATE webhook.subscription_streams stream
    SET last_event_number = removed.highest
    FROM (SELECT d.subscription_id, max(d.event_number) AS highest FROM deleted d
          WHERE d.event_number IS NOT NULL GROUP BY d.subscription_id) removed
    WHERE stream.subscription_id = removed.subscription_id AND removed.highest > stream.last_event_number;
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER subscription_events_numbers_floor_on_delete
  AFTER DELETE ON webhook.subscription_events
  REFERENCING OLD TABLE AS deleted
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.keep_event_numbers_floor();

CREATE OR REPLACE TRIGGER subscription_events_numbers_floor_on_truncate
  BEFORE TRUNCATE ON webhook.subscription_events
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.keep_event_numbers_floor();
