-- Numbers the events a topic-based subscription missed, in log order, after
-- the last number given: those recorded while it was in error (the topic
-- trigger records them abandoned, without a number and without a lock, so
-- that a subscriber that is down never holds up the writers) and those
-- abandoned unsent when it left `active`. The Backport IG's count of events
-- goes on while a subscription is in error; its subscriber sees the gap and
-- $events serves them. Called when the numbers are needed: before the
-- reactivation handshake, and by $status and $events. Returns the last
-- number given.
--
-- Under the lock of the subscription's stream row, taken first in a
-- statement of its own, so that the numbering reads what is committed once
-- it holds it (the last number given: webhook.last_event_number). Not while
-- a sender holds the subscription's claim (webhook.subscription_claims, read
-- under that lock, which every claimer takes): the sender numbers what it
-- claims (webhook.prepare_claimed_events), and the missed events are
-- numbered on a later call.

CREATE OR REPLACE FUNCTION webhook.number_missed_events(subscription uuid) RETURNS bigint
  LANGUAGE plpgsql
  AS $$
DECLARE
  numbered_before bigint;
BEGIN
  PERFORM FROM webhook.subscription_streams stream
  WHERE stream.subscription_id = subscription
  FOR UPDATE;
  IF FOUND AND NOT EXISTS (SELECT FROM webhook.subscription_claims claim WHERE claim.subscription_id = subscription) THEN
    numbered_before := webhook.last_event_number(subscription);
    WITH missed AS (
      SELECT e.id, row_number() OVER (ORDER BY e.id) AS n
      FROM webhook.subscription_events e
      JOIN webhook.subscriptions s ON s.id = e.subscription_id
      WHERE e.subscription_id = subscription AND s.topic_id IS NOT NULL
        AND e.status = 'abandoned' AND e.event_number IS NULL
    )
    UPDATE webhook.subscription_events e
    SET event_number = numbered_before + missed.n
    FROM missed
    WHERE e.id = missed.id AND e.event_number IS NULL;
  END IF;
  RETURN webhook.last_event_number(subscription);
END
$$;
