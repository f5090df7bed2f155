-- A worker's next events of a subscription it holds: up to max_events due
-- events logged after after_event (the last of its batch before), and no
-- more than max_bytes of their resource versions, superseded or numbered
-- like any claim (webhook.prepare_claimed_events), the claim kept. The
-- worker asks while it is still sending the batch before, so that a long
-- stream of one subscription does not wait for a release and a new claim
-- between batches (src/dispatch/events/delivery/deliver-claim.ts).
--
-- Only events after the batch before: an event of the resources in flight is
-- then a newer version, which the worker sends after them. A retry that came
-- due meanwhile waits for the worker's release and the next claim, which
-- takes the oldest first; the worker releases after a few batches
-- (maxBatchesPerClaim). Returns nothing when the subscription has left
-- `active`, or when the worker no longer holds its claim (it was taken for
-- dead and the claim freed).
--
-- The versions are counted as webhook.claim_subscription_events counts them
-- (uncompressed, a compressed one decompressed to be counted), in log order,
-- no further than the first that does not fit; unlike a claim, this takes
-- none past max_bytes, not even one: the batch in flight is the stream's
-- progress, and the events left out go in a batch after it, or the next
-- claim. Each row says whether due events were left out (by max_events or
-- max_bytes), for the worker to ask again.

CREATE OR REPLACE FUNCTION webhook.claim_more_subscription_events(worker text, subscription uuid, after_event bigint, max_events integer, max_bytes bigint)
  RETURNS TABLE (subscription_id uuid, subscription_version integer, event_id bigint, event_number bigint,
                 resource_type text, resource_id text, version_id integer, deleted boolean, attempts integer,
                 bytes integer, more_due boolean)
  LANGUAGE plpgsql
  -- Every row by key, whatever the statistics (webhook.prepare_claimed_events says why).
  SET enable_seqscan = off
  AS $$
DECLARE
  batch bigint[];
  batch_bytes integer[];
  bytes_left bigint := max_bytes;
  more boolean := false;
  due record;
  in_order boolean;
  events_before bigint;
BEGIN
  SELECT s.topic_id IS NOT NULL INTO in_order FROM webhook.subscription_claims claim
  JOIN webhook.subscriptions s ON s.id = claim.subscription_id
  WHERE claim.subscription_id = subscription AND claim.claimed_by = worker AND s.status = 'active';
  IF NOT FOUND THEN
    RETURN;
  END IF;
  events_before := CASE WHEN in_order THEN webhook.first_event_waiting_for_retry(subscription) ELSE 9223372036854775807 END;

  -- Its due events in log order, each with the size of its version, one
  -- past max_events to know whether any is left out.
  FOR due IN SELECT * FROM webhook.due_events_with_sizes(subscription, after_event, events_before, max_events + 1) LOOP
    IF coalesce(cardinality(batch), 0) = max_events OR due.size > bytes_left THEN
      more := true;
      EXIT;
    END IF;
    batch := array_append(batch, due.id);
    batch_bytes := array_append(batch_bytes, due.size);
    bytes_left := bytes_left - due.size;
  END LOOP;
  IF batch IS NULL THEN
    RETURN;
  END IF;

  RETURN QUERY
    SELECT prepared.subscription_id, prepared.subscription_version, prepared.event_id, prepared.event_number,
           prepared.resource_type, prepared.resource_id, prepared.version_id, prepared.deleted, prepared.attempts,
           counted.size, more
    FROM webhook.prepare_claimed_events(batch) prepared
    JOIN unnest(batch, batch_bytes) AS counted(event_id, size) ON counted.event_id = prepared.event_id
    ORDER BY prepared.event_id;
END
$$;
