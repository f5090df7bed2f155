-- Whether a pending event may be sent now: its retry's time has come (or it
-- has none), and, for a subscription whose events go in order (a topic-based
-- one, whose subscriber reads their numbers), no earlier event of it is
-- still waiting for its retry. A classic subscription's events are states of
-- resources, each on its own: a failed one does not hold the others back.
-- Used by the claim functions (webhook.claim_subscription_events,
-- webhook.claim_more_subscription_events); the earlier events are found on
-- the pending-events index.
CREATE OR REPLACE FUNCTION webhook.event_is_due(event webhook.subscription_events, in_order boolean) RETURNS boolean
  LANGUAGE sql STABLE
  RETURN (event.not_before IS NULL OR event.not_before <= now())
    AND (NOT in_order
         OR NOT EXISTS (SELECT FROM webhook.subscription_events earlier
                         WHERE earlier.subscription_id = event.subscription_id AND earlier.status = 'pending'
                           AND earlier.id < event.id AND earlier.not_before > now()));
