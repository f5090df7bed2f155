-- A sender's claim of the heartbeats due (FHIR Subscriptions Backport IG,
-- backport-heartbeat-period): the active subscriptions with a heartbeat
-- period that no call (handshake, notification or heartbeat) went to for
-- that long, and that no sender holds, up to max_subscriptions. Each is
-- claimed like its events (webhook.subscription_streams.claimed_by), so that
-- a heartbeat never goes out beside a notification of the same
-- subscription, nor twice from two workers; the sender releases the claim
-- when it records the call. Returns each with its latest event number (the
-- heartbeat's events-since-subscription-start).

CREATE OR REPLACE FUNCTION webhook.claim_heartbeats(worker text, max_subscriptions integer)
  RETURNS TABLE (subscription_id uuid, subscription_version integer, last_event_number bigint)
  -- plpgsql, not sql: its body names webhook.last_event_number, whose file is applied after this one.
  LANGUAGE plpgsql
  AS $$
BEGIN
  RETURN QUERY
  WITH due AS (
    SELECT stream.subscription_id, s.version_id
    FROM webhook.subscriptions s
    JOIN webhook.subscription_streams stream ON stream.subscription_id = s.id
    WHERE s.heartbeat_period_seconds IS NOT NULL AND s.status = 'active'
      AND stream.claimed_by IS NULL
      AND NOT EXISTS (SELECT FROM webhook.delivery_attempts called
                       WHERE called.subscription_id = s.id
                         AND called.started_at > now() - make_interval(secs => s.heartbeat_period_seconds))
    LIMIT max_subscriptions
    FOR UPDATE OF stream SKIP LOCKED
  )
  UPDATE webhook.subscription_streams stream
  SET claimed_by = worker, claimed_at = now()
  FROM due
  WHERE stream.subscription_id = due.subscription_id
  RETURNING stream.subscription_id, due.version_id, webhook.last_event_number(stream.subscription_id);
END
$$;
