-- A worker's claim: the due events of up to max_subscriptions subscriptions
-- that no worker is sending, up to max_events each, in one statement. A broad
-- write (one resource, a thousand subscriptions) costs a few claims, not a
-- thousand jobs.
--
-- A subscription is claimed by one worker at a time (its row of
-- webhook.subscription_streams, locked FOR UPDATE SKIP LOCKED, then marked
-- claimed_by): its events go out in log order, at most DELIVERY_PARALLEL_CALLS
-- at once, and a subscriber that hangs holds only its own claim. The worker
-- releases it when it has recorded the outcome (src/dispatch/events/log.ts);
-- a worker that dies is dropped from webhook.worker_pools, which frees it.
--
-- The subscriptions with pending events are found by a loose scan of the
-- pending-events index (one probe per such subscription): idle subscriptions
-- cost nothing, however many there are. The free ones are claimed oldest
-- pending event first, so that no subscription waits behind busier ones.
--
-- Each worker takes at most its share: the subscriptions with pending events
-- divided by the live workers (webhook.worker_pools, event senders heard from
-- in the last 20 seconds), less those it holds. Without it, a worker that
-- releases a subscription would claim it again at once, and the others, which
-- claim when a write's NOTIFY or their poll wakes them, would find nothing
-- free: one process would do the work of all.
--
-- A topic-based subscription's events are claimed in order: none while an
-- earlier one waits for its retry (webhook.first_event_waiting_for_retry).
--
-- The claimed events are superseded or numbered, and returned in the order to
-- send them, by webhook.prepare_claimed_events. A worker that got a full
-- batch takes the subscription's next events, without releasing it, with
-- webhook.claim_more_subscription_events.

CREATE OR REPLACE FUNCTION webhook.claim_subscription_events(worker text, max_subscriptions integer, max_events integer)
  RETURNS TABLE (subscription_id uuid, subscription_version integer, event_id bigint, event_number bigint,
                 resource_type text, resource_id text, version_id integer, deleted boolean, attempts integer)
  LANGUAGE plpgsql
  AS $$
DECLARE
  pending_subscriptions integer;
  mine integer;
  live_workers integer;
  candidates uuid[];
  candidate uuid;
  wanted integer;
  free uuid;
  claimed uuid[];
  batch bigint[];
BEGIN
  WITH RECURSIVE with_pending(subscription_id, oldest_event) AS (
    (SELECT e.subscription_id, e.id FROM webhook.subscription_events e
      WHERE e.status = 'pending' ORDER BY e.subscription_id, e.id LIMIT 1)
    UNION ALL
    SELECT next.subscription_id, next.id
    FROM with_pending
    CROSS JOIN LATERAL (SELECT e.subscription_id, e.id FROM webhook.subscription_events e
                         WHERE e.status = 'pending' AND e.subscription_id > with_pending.subscription_id
                         ORDER BY e.subscription_id, e.id LIMIT 1) next
  )
  SELECT count(*),
         count(*) FILTER (WHERE stream.claimed_by = worker),
         array_agg(with_pending.subscription_id ORDER BY with_pending.oldest_event) FILTER (WHERE stream.claimed_by IS NULL)
  INTO pending_subscriptions, mine, candidates
  FROM with_pending
  JOIN webhook.subscription_streams stream ON stream.subscription_id = with_pending.subscription_id;

  SELECT greatest(count(*), 1) INTO live_workers
  FROM webhook.worker_pools pool
  WHERE pool.kind = 'event-sender' AND webhook.worker_pool_is_live(pool.last_seen);

  -- The free candidates in order, locked one by one until the share is
  -- claimed: each is one probe by key, and the loop stops at the share (a
  -- single statement over all the candidates would test and sort them all,
  -- a thousand for a write that matched a thousand subscriptions).
  wanted := greatest(least(max_subscriptions, ceil(pending_subscriptions::numeric / live_workers)::integer - mine), 0);
  FOREACH candidate IN ARRAY coalesce(candidates, '{}') LOOP
    EXIT WHEN coalesce(cardinality(claimed), 0) >= wanted;
    SELECT stream.subscription_id INTO free
    FROM webhook.subscription_streams stream
    JOIN webhook.subscriptions s ON s.id = stream.subscription_id
    CROSS JOIN LATERAL (SELECT CASE WHEN s.topic_id IS NULL THEN 9223372036854775807
                                    ELSE webhook.first_event_waiting_for_retry(s.id) END AS events_before) held_back
    WHERE stream.subscription_id = candidate
      AND stream.claimed_by IS NULL
      AND s.status = 'active'
      AND EXISTS (SELECT FROM webhook.subscription_events e
                   WHERE e.subscription_id = stream.subscription_id AND e.status = 'pending'
                     AND e.id < held_back.events_before
                     AND (e.not_before IS NULL OR e.not_before <= now()))
    FOR UPDATE OF stream SKIP LOCKED;
    IF FOUND THEN
      claimed := array_append(claimed, free);
    END IF;
  END LOOP;
  IF claimed IS NULL THEN
    RETURN;
  END IF;

  UPDATE webhook.subscription_streams stream
  SET claimed_by = worker, claimed_at = now()
  WHERE stream.subscription_id = ANY (claimed);

  SELECT array_agg(due.id) INTO batch
  FROM unnest(claimed) AS one(subscription_id)
  JOIN webhook.subscriptions s ON s.id = one.subscription_id
  CROSS JOIN LATERAL (SELECT CASE WHEN s.topic_id IS NULL THEN 9223372036854775807
                                  ELSE webhook.first_event_waiting_for_retry(s.id) END AS events_before) held_back
  CROSS JOIN LATERAL (
    SELECT e.id FROM webhook.subscription_events e
    WHERE e.subscription_id = one.subscription_id AND e.status = 'pending'
      AND e.id < held_back.events_before
      AND (e.not_before IS NULL OR e.not_before <= now())
    ORDER BY e.id
    LIMIT max_events
  ) due;

  RETURN QUERY SELECT * FROM webhook.prepare_claimed_events(batch);
END
$$;
