-- A worker's next events of a subscription it holds: up to max_events due
-- events logged after after_event (the last of its batch before), superseded
-- or numbered like any claim (webhook.prepare_claimed_events), the claim kept.
-- The worker asks while it is still sending the batch before, so that a long
-- stream of one subscription does not wait for a release and a new claim
-- between batches (src/dispatch/events/notification.ts).
--
-- Only events after the batch before: an event of the resources in flight is
-- then a newer version, which the worker sends after them. A retry that came
-- due meanwhile waits for the worker's release and the next claim, which
-- takes the oldest first; the worker releases after a few batches
-- (maxBatchesPerClaim). Returns nothing when the subscription has left
-- `active`, or when the worker no longer holds its stream (it was taken for
-- dead and the claim freed).

CREATE OR REPLACE FUNCTION webhook.claim_more_subscription_events(worker text, subscription uuid, after_event bigint, max_events integer)
  RETURNS TABLE (subscription_id uuid, subscription_version integer, event_id bigint, event_number bigint,
                 resource_type text, resource_id text, version_id integer, deleted boolean, attempts integer)
  LANGUAGE plpgsql
  AS $$
DECLARE
  batch bigint[];
  in_order boolean;
  events_before bigint;
BEGIN
  SELECT s.topic_id IS NOT NULL INTO in_order FROM webhook.subscription_streams stream
  JOIN webhook.subscriptions s ON s.id = stream.subscription_id
  WHERE stream.subscription_id = subscription AND stream.claimed_by = worker AND s.status = 'active';
  IF NOT FOUND THEN
    RETURN;
  END IF;
  events_before := CASE WHEN in_order THEN webhook.first_event_waiting_for_retry(subscription) ELSE 9223372036854775807 END;

  SELECT array_agg(due.id) INTO batch
  FROM (
    SELECT e.id FROM webhook.subscription_events e
    WHERE e.subscription_id = subscription AND e.status = 'pending' AND e.id > after_event
      AND e.id < events_before
      AND (e.not_before IS NULL OR e.not_before <= now())
    ORDER BY e.id
    LIMIT max_events
  ) due;
  IF batch IS NULL THEN
    RETURN;
  END IF;

  RETURN QUERY SELECT * FROM webhook.prepare_claimed_events(batch);
END
$$;
