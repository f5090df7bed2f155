-- A sender's claim of the heartbeats due (FHIR Subscriptions Backport IG,
-- backport-heartbeat-period): the active subscriptions with a heartbeat
-- period that no call (handshake, notification or heartbeat) went to for
-- that long, and that no sender holds, up to max_subscriptions. Each is
-- claimed like its events (a row of webhook.subscription_claims, made under
-- the lock of its stream row), so that a heartbeat never goes out beside a
-- notification of the same subscription, nor twice from two workers; the
-- sender releases the claim when it records the call. Returns each with its
-- latest event number (the heartbeat's events-since-subscription-start).

CREATE OR REPLACE FUNCTION webhook.claim_heartbeats(worker text, max_subscriptions integer)
  RETURNS TABLE (subscription_id uuid, subscription_version integer, last_event_number bigint)
  -- plpgsql, not sql: its body names webhook.last_event_number, whose file is applied after this one, and
  -- the claim's check must be a statement of its own (webhook.claim_events_of_subscriptions says why).
  LANGUAGE plpgsql
  AS $$
DECLARE
  locked uuid[];
BEGIN
  -- The claims seen here are read before the locks are held: those made
  -- since are found by the check below.
  locked := array(
    SELECT stream.subscription_id
    FROM webhook.subscriptions s
    JOIN webhook.subscription_streams stream ON stream.subscription_id = s.id
    WHERE s.heartbeat_period_seconds IS NOT NULL AND s.status = 'active'
      AND NOT EXISTS (SELECT FROM webhook.subscription_claims claim WHERE claim.subscription_id = s.id)
      AND NOT EXISTS (SELECT FROM webhook.delivery_attempts called
                       WHERE called.subscription_id = s.id
                         AND called.started_at > now() - make_interval(secs => s.heartbeat_period_seconds))
    LIMIT max_subscriptions
    FOR UPDATE OF stream SKIP LOCKED);

  RETURN QUERY
  WITH claimed AS (
    INSERT INTO webhook.subscription_claims (generation, subscription_id, claimed_by)
    SELECT generation.current_generation, due.subscription_id, worker
    FROM unnest(locked) AS due(subscription_id)
    CROSS JOIN webhook.pending_events_generation generation
    WHERE NOT EXISTS (SELECT FROM webhook.subscription_claims claim WHERE claim.subscription_id = due.subscription_id)
    RETURNING webhook.subscription_claims.subscription_id
  )
  SELECT claimed.subscription_id, s.version_id, webhook.last_event_number(claimed.subscription_id)
  FROM claimed
  JOIN webhook.subscriptions s ON s.id = claimed.subscription_id;
END
$$;
