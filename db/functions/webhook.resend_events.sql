-- Sends recorded events of a subscription again, when someone asks (an API
-- client on its own subscription, an operator): each settled event given
-- (delivered, failed for good, or abandoned while the subscription was not
-- active) becomes pending again, with its number and its version, and the
-- senders are woken. A resend is a new attempt of the same event: the
-- subscriber gets the same event number, the same version and the same
-- webhook-id as before, and deduplicates it like a retry. Its attempts start
-- afresh (attempt 1 again in webhook.delivery_attempts), with the whole
-- retry schedule: an event that had used up its attempts would otherwise
-- deactivate the subscription at the resend's first failure. Nothing is ever re-sent without being asked (the spec: missed
-- events are not replayed on reactivation).
--
-- Only to an active subscription; events already pending, or whose version
-- is gone, are left as they are. A classic subscription's event whose
-- resource has had a newer version sent since is superseded when claimed (a
-- subscriber never gets a version after a newer one): the API refuses to
-- resend it, saying so. Returns the events queued.

CREATE OR REPLACE FUNCTION webhook.resend_events(subscription uuid, event_ids bigint[])
  RETURNS TABLE (event_id bigint, event_number bigint, resource_type text, resource_id text, version_id integer)
  LANGUAGE plpgsql
  AS $$
BEGIN
  RETURN QUERY
    WITH queued AS (
      UPDATE webhook.subscription_events e
      SET status = 'pending', settled_at = NULL, not_before = NULL, attempts = 0
      FROM webhook.subscriptions s
      WHERE s.id = e.subscription_id AND s.status = 'active'
        AND e.subscription_id = subscription AND e.id = ANY (event_ids)
        AND e.status IN ('delivered', 'failed', 'abandoned')
      RETURNING e.id, e.event_number, e.resource_type, e.resource_id, e.version_id
    )
    SELECT * FROM queued ORDER BY queued.id;
  IF FOUND THEN
    PERFORM pg_notify('webhook_subscription_events', '');
  END IF;
END
$$;
