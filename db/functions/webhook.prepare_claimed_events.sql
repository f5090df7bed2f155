-- The events of a claim (webhook.claim_subscription_events,
-- webhook.claim_more_subscription_events), before anything is sent:
--   * an event of a classic subscription is superseded (and settled so,
--     without a number) when the claim holds a newer version of its
--     resource, or the subscriber was already called with a newer one (a
--     retry that comes after the next version): a subscriber never receives
--     a version after a newer one. A topic-based subscription's events are
--     changes, not states: each is sent, numbered, and the subscriber orders
--     them by their numbers;
--   * the events still without a number get their subscription's next
--     numbers, in log order: gapless from 1, kept across retries.
-- Returns the pending ones in the order to send them.

CREATE OR REPLACE FUNCTION webhook.prepare_claimed_events(batch bigint[])
  RETURNS TABLE (subscription_id uuid, subscription_version integer, event_id bigint, event_number bigint,
                 resource_type text, resource_id text, version_id integer, deleted boolean, attempts integer)
  LANGUAGE plpgsql
  AS $$
BEGIN
  WITH in_claim AS (
    SELECT e.id, e.subscription_id, e.resource_type, e.resource_id, e.version_id,
           max(e.version_id) OVER (PARTITION BY e.subscription_id, e.resource_type, e.resource_id) AS newest_claimed
    FROM webhook.subscription_events e
    JOIN webhook.subscriptions s ON s.id = e.subscription_id
    WHERE e.id = ANY (batch) AND s.topic_id IS NULL
  )
  UPDATE webhook.subscription_events e
  SET status = 'superseded', settled_at = now()
  FROM in_claim
  WHERE e.id = in_claim.id
    AND (in_claim.version_id < in_claim.newest_claimed
         OR EXISTS (SELECT FROM webhook.delivery_attempts called
                     WHERE called.subscription_id = in_claim.subscription_id AND called.kind = 'notification'
                       AND called.resource_type = in_claim.resource_type AND called.resource_id = in_claim.resource_id
                       AND called.version_id > in_claim.version_id));

  WITH fresh AS (
    SELECT e.id, e.subscription_id,
           row_number() OVER (PARTITION BY e.subscription_id ORDER BY e.id) AS n,
           count(*) OVER (PARTITION BY e.subscription_id) AS total
    FROM webhook.subscription_events e
    WHERE e.id = ANY (batch) AND e.status = 'pending' AND e.event_number IS NULL
  ), advanced AS (
    UPDATE webhook.subscription_streams stream
    SET last_event_number = stream.last_event_number + counted.total
    FROM (SELECT DISTINCT fresh.subscription_id, fresh.total FROM fresh) counted
    WHERE stream.subscription_id = counted.subscription_id
    RETURNING stream.subscription_id, stream.last_event_number - counted.total AS numbered_before
  )
  UPDATE webhook.subscription_events e
  SET event_number = advanced.numbered_before + fresh.n
  FROM fresh JOIN advanced ON advanced.subscription_id = fresh.subscription_id
  WHERE e.id = fresh.id;

  RETURN QUERY
    SELECT e.subscription_id, s.version_id, e.id, e.event_number, e.resource_type, e.resource_id, e.version_id, e.deleted, e.attempts
    FROM webhook.subscription_events e
    JOIN webhook.subscriptions s ON s.id = e.subscription_id
    WHERE e.id = ANY (batch) AND e.status = 'pending'
    ORDER BY e.subscription_id, e.id;
END
$$;
