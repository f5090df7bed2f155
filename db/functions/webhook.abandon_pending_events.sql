-- A subscription that leaves `active` (deactivated after failures, switched
-- off) or is deleted has its pending events abandoned: events missed while not
-- active are never replayed (the spec's reactivation sends the next event
-- only; a topic-based subscription's are numbered later, by
-- webhook.number_missed_events, and its subscriber fetches them with
-- $events). In the transaction that changes the subscription, so that no
-- claim takes them afterwards. A call in flight still records what it got.

CREATE OR REPLACE FUNCTION webhook.abandon_pending_events() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  UPDATE webhook.subscription_events
  SET status = 'abandoned', settled_at = now()
  WHERE id IN (SELECT pending.event_id FROM webhook.pending_events pending WHERE pending.subscription_id = OLD.id);
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
