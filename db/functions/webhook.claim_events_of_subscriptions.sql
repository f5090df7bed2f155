-- A worker's claim of the candidates it was given, in their order (the list
-- of webhook.subscriptions_to_claim, oldest pending event first): the due
-- events of up to max_subscriptions of them that no worker is sending, up to
-- max_events each and max_bytes in all, in one statement. A broad write (one
-- resource, a thousand subscriptions) costs a few claims, not a thousand jobs.
-- A subscription of the list that was claimed or sent meanwhile, or is no
-- longer active, is passed over, one probe by key each.
--
-- A subscription is claimed by one worker at a time (a row of
-- webhook.subscription_claims, made under the lock of its row of
-- webhook.subscription_streams, taken FOR UPDATE SKIP LOCKED): its events go
-- out in log order, at most DELIVERY_PARALLEL_CALLS at once, and a subscriber
-- that hangs holds only its own claim. The worker releases it when it has
-- recorded the outcome (src/dispatch/events/log.ts); a worker that dies is
-- dropped from webhook.worker_pools, which deletes its claims. Neither
-- writes the stream row (migration 0036 says why).
--
-- Bounded by bytes too (DELIVERY_MAX_CLAIMED_BYTES, src/dispatch/events/sender.ts):
-- the worker loads every claimed event's resource version and keeps it while
-- it sends, so a claim of a hundred 10 MB resources would hold a gigabyte.
-- Each version is counted at its size uncompressed, about the size of its
-- JSON text, what the worker holds (webhook.due_events_with_sizes).
--
-- Each subscription's events are taken in log order while they fit, read
-- and counted one at a time, no further than the first that does not: the
-- events left out stay pending and come first in its next batch. A
-- subscription none of whose events fits is not claimed, and ends the claim
-- (it is then first in line for the next). The claim's first event is taken
-- whatever its size, so that a version larger than the bound still goes,
-- alone.
--
-- A topic-based subscription's events are claimed in order: none while an
-- earlier one waits for its retry (webhook.first_event_waiting_for_retry).
--
-- The claimed events are superseded or numbered, and returned in the order to
-- send them, by webhook.prepare_claimed_events, each with the bytes it was
-- counted for and whether its subscription has due events left out of the
-- claim (by max_events or max_bytes). A worker that got such a batch takes
-- the subscription's next events, without releasing it, with
-- webhook.claim_more_subscription_events.

CREATE OR REPLACE FUNCTION webhook.claim_events_of_subscriptions(worker text, candidates uuid[], max_subscriptions integer, max_events integer, max_bytes bigint)
  RETURNS TABLE (subscription_id uuid, subscription_version integer, event_id bigint, event_number bigint,
                 resource_type text, resource_id text, version_id integer, deleted boolean, attempts integer,
                 bytes integer, more_due boolean)
  LANGUAGE plpgsql
  -- Every row by key, whatever the statistics (webhook.prepare_claimed_events says why).
  SET enable_seqscan = off
  -- The one-row generation table has no index to read it by: its scan is then costed as disabled (10^10 on
  -- PostgreSQL 15), far past jit_above_cost, and the claim's insert compiled itself with LLVM, 45-120 ms each time.
  SET jit = off
  AS $$
DECLARE
  candidate uuid;
  free uuid;
  events_before bigint;
  claimed uuid[];
  left_out uuid[];
  batch bigint[];
  batch_bytes integer[];
  bytes_left bigint := max_bytes;
  taken integer;
  more boolean;
  due record;
BEGIN
  -- The candidates in order, locked one by one until max_subscriptions are
  -- claimed or the bytes are: each is one probe by key, and the loop stops
  -- there (a single statement over all the candidates would test and sort
  -- them all, a thousand for a write that matched a thousand subscriptions).
  FOREACH candidate IN ARRAY coalesce(candidates, '{}') LOOP
    EXIT WHEN coalesce(cardinality(claimed), 0) >= max_subscriptions OR (bytes_left <= 0 AND batch IS NOT NULL);
    -- Named twice: its row's lock is this transaction's own, which SKIP LOCKED does not skip.
    CONTINUE WHEN candidate = ANY (coalesce(claimed, '{}'));
    SELECT stream.subscription_id, held_back.events_before INTO free, events_before
    FROM webhook.subscription_streams stream
    JOIN webhook.subscriptions s ON s.id = stream.subscription_id
    CROSS JOIN LATERAL (SELECT CASE WHEN s.topic_id IS NULL THEN 9223372036854775807
                                    ELSE webhook.first_event_waiting_for_retry(s.id) END AS events_before) held_back
    WHERE stream.subscription_id = candidate
      AND s.status = 'active'
      AND EXISTS (SELECT FROM webhook.pending_events pending
                   JOIN webhook.subscription_events e ON e.id = pending.event_id
                   WHERE pending.subscription_id = stream.subscription_id
                     AND pending.event_id < held_back.events_before
                     AND (e.not_before IS NULL OR e.not_before <= now()))
    FOR UPDATE OF stream SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    -- Held by a sender: read now, in a statement of its own, whose snapshot
    -- is taken once the lock is held (and once a rotation that was moving
    -- the claims has committed: its partitions are locked first), so that
    -- every claim made before is seen (only a holder of the lock makes one).
    CONTINUE WHEN EXISTS (SELECT FROM webhook.subscription_claims claim WHERE claim.subscription_id = free);

    -- Its due events in log order, each with the size of its version, one
    -- past max_events to know whether any is left out.
    taken := 0;
    more := false;
    FOR due IN SELECT * FROM webhook.due_events_with_sizes(free, 0, events_before, max_events + 1) LOOP
      IF taken = max_events OR (due.size > bytes_left AND batch IS NOT NULL) THEN
        more := true;
        EXIT;
      END IF;
      batch := array_append(batch, due.id);
      batch_bytes := array_append(batch_bytes, due.size);
      bytes_left := bytes_left - due.size;
      taken := taken + 1;
    END LOOP;
    -- Not even its first event fits in the bytes left: the claim is full.
    -- The subscription stays free (its row's lock ends with the claim's
    -- transaction), first in line for the next claim.
    EXIT WHEN taken = 0;
    claimed := array_append(claimed, free);
    IF more THEN
      left_out := array_append(left_out, free);
    END IF;
  END LOOP;
  IF claimed IS NULL THEN
    RETURN;
  END IF;

  RETURN QUERY
    SELECT prepared.subscription_id, prepared.subscription_version, prepared.event_id, prepared.event_number,
           prepared.resource_type, prepared.resource_id, prepared.version_id, prepared.deleted, prepared.attempts,
           counted.size, prepared.subscription_id = ANY (coalesce(left_out, '{}'))
    FROM webhook.prepare_claimed_events(batch) prepared
    JOIN unnest(batch, batch_bytes) AS counted(event_id, size) ON counted.event_id = prepared.event_id
    ORDER BY prepared.subscription_id, prepared.event_id;

  -- The claims, of the subscriptions in the answer: one every claimed event
  -- of which was set aside (a retry of a version older than one already
  -- sent) is not in it, and is not held by a sender that never heard of it
  -- until the sweep of stranded claims frees it 10 s later. The stream rows'
  -- locks, held until this transaction ends, keep other claimers out
  -- meanwhile.
  INSERT INTO webhook.subscription_claims (generation, subscription_id, claimed_by)
  SELECT generation.current_generation, claimed_one, worker
  FROM unnest(claimed) AS claimed_one
  CROSS JOIN webhook.pending_events_generation generation
  WHERE EXISTS (SELECT FROM webhook.pending_events pending
                 WHERE pending.subscription_id = claimed_one AND pending.event_id = ANY (batch));
END
$$;
