-- A subscription that leaves `active` (deactivated after failures, switched
-- off) or is deleted has its pending events abandoned: events missed while not
-- active are never replayed (the spec's reactivation sends the next event
-- only; a topic-based subscriber can fetch them with $events). In the transaction that changes the subscription, so that no claim
-- takes them afterwards. A call in flight still records what it got.

CREATE OR REPLACE FUNCTION webhook.abandon_pending_events() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  -- A topic-based subscription's events are numbered all the same, in log
  -- order (those a claim had not numbered yet): its subscriber sees the gap
  -- and $events serves them.
  IF TG_OP = 'UPDATE' AND OLD.topic_id IS NOT NULL THEN
    WITH fresh AS (
      SELECT e.id, row_number() OVER (ORDER BY e.id) AS n, count(*) OVER () AS total
      FROM webhook.subscription_events e
      WHERE e.subscription_id = OLD.id AND e.status = 'pending' AND e.event_number IS NULL
    ), advanced AS (
      UPDATE webhook.subscription_streams stream
      SET last_event_number = stream.last_event_number + (SELECT max(total) FROM fresh)
      WHERE stream.subscription_id = OLD.id AND EXISTS (SELECT FROM fresh)
      RETURNING stream.last_event_number - (SELECT max(total) FROM fresh) AS numbered_before
    )
    UPDATE webhook.subscription_events e
    SET event_number = advanced.numbered_before + fresh.n
    FROM fresh, advanced
    WHERE e.id = fresh.id;
  END IF;
  UPDATE webhook.subscription_events
  SET status = 'abandoned', settled_at = now()
  WHERE subscription_id = OLD.id AND status = 'pending';
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER subscriptions_abandon_pending_events_on_leaving_active
  AFTER UPDATE OF status ON webhook.subscriptions
  FOR EACH ROW WHEN (OLD.status = 'active' AND NEW.status <> 'active')
  EXECUTE FUNCTION webhook.abandon_pending_events();

CREATE OR REPLACE TRIGGER subscriptions_abandon_pending_events_on_delete
  AFTER DELETE ON webhook.subscriptions
  FOR EACH ROW EXECUTE FUNCTION webhook.abandon_pending_events();
