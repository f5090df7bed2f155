-- The subscriptions a sender may claim now, and how many of them it may take:
-- those with pending events that no sender holds, the one whose oldest
-- pending event is oldest first, and its share (the subscriptions with
-- pending events divided by the live senders, less those it holds). The first
-- half of a claim (webhook.claim_subscription_events); a sender keeps the list
-- and claims from it (webhook.claim_events_of_subscriptions) until it is used
-- up or new events come (src/dispatch/events/sender.ts): this scan reads
-- every subscription with pending events, a thousand after a write that
-- matched a thousand subscriptions, and the claims that refill the slots of
-- deliveries ended since need not read them again.
--
-- The subscriptions with pending events are found by a loose scan of the
-- pending set's index (webhook.pending_events, one probe per such
-- subscription): idle subscriptions cost nothing, however many there are. The list is a snapshot: a
-- subscription in it may have been claimed or sent since, which the claim
-- checks, one probe each (and one claimed just now may be in it: a claim
-- is a row of webhook.subscription_claims, which a claim reads again under
-- its lock).
--
-- The share: without it, a sender that releases a subscription would claim
-- it again at once, and the others, which claim when a write's NOTIFY or
-- their poll wakes them, would find nothing free: one process would do the
-- work of all. The live senders are those of webhook.worker_pools heard
-- from in the last 20 seconds.

CREATE OR REPLACE FUNCTION webhook.subscriptions_to_claim(worker text)
  RETURNS TABLE (share integer, candidates uuid[])
  LANGUAGE plpgsql STABLE
  AS $$
DECLARE
  pending_subscriptions integer;
  mine integer;
  live_workers integer;
  free uuid[];
BEGIN
  WITH RECURSIVE with_pending(subscription_id, oldest_event) AS (
    (SELECT p.subscription_id, p.event_id FROM webhook.pending_events p
      ORDER BY p.subscription_id, p.event_id LIMIT 1)
    UNION ALL
    SELECT next.subscription_id, next.event_id
    FROM with_pending
    CROSS JOIN LATERAL (SELECT p.subscription_id, p.event_id FROM webhook.pending_events p
                         WHERE p.subscription_id > with_pending.subscription_id
                         ORDER BY p.subscription_id, p.event_id LIMIT 1) next
  )
  SELECT count(*),
         count(*) FILTER (WHERE claim.claimed_by = worker),
         array_agg(with_pending.subscription_id ORDER BY with_pending.oldest_event) FILTER (WHERE claim.claimed_by IS NULL)
  INTO pending_subscriptions, mine, free
  FROM with_pending
  LEFT JOIN LATERAL (SELECT c.claimed_by FROM webhook.subscription_claims c
                      WHERE c.subscription_id = with_pending.subscription_id LIMIT 1) claim ON true;

  SELECT greatest(count(*), 1) INTO live_workers
  FROM webhook.worker_pools pool
  WHERE pool.kind = 'event-sender' AND webhook.worker_pool_is_live(pool.last_seen);

  share := greatest(ceil(pending_subscriptions::numeric / live_workers)::integer - mine, 0);
  candidates := coalesce(free, '{}');
  RETURN NEXT;
END
$$;
