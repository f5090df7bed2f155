-- The first (in log order) of a subscription's pending events whose retry
-- is not due yet, or the largest bigint when none is. A topic-based subscription's
-- events go in order, its subscriber reading their numbers: the claim
-- functions take none at or after this one (webhook.claim_subscription_events,
-- webhook.claim_more_subscription_events). A classic subscription's events
-- are states of resources, each on its own: a failed one holds no other back.
-- Found on the index of the events waiting for a retry (migration 0020),
-- which holds the few of them, not every pending event; the claim then
-- reads the pending events up to it in the pending set (webhook.pending_events),
-- and no further. Evaluated once per subscription a claim looks at.
CREATE OR REPLACE FUNCTION webhook.first_event_waiting_for_retry(subscription uuid) RETURNS bigint
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN coalesce((SELECT min(e.id) FROM webhook.subscription_events e
                   WHERE e.subscription_id = subscription AND e.status = 'pending'
                     AND e.not_before IS NOT NULL AND e.not_before > now()), 9223372036854775807);
