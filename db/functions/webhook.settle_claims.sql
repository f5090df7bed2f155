-- A sender's settlement of claims of different subscriptions, in one call
-- (src/dispatch/events/log.ts, settleClaims): their calls recorded, their
-- events' outcomes written, a throttled subscription's next call time kept
-- for its next sender, and each claim released unless kept. One settlement
-- per subscription: an UPDATE applies one joined row per target row, so a
-- second one would be lost.
--
-- A function rather than a statement from the sender, because its
-- statements' plans are kept for the session: the same statement sent as
-- text was parsed and planned on every settlement, about 0.4 ms of its
-- 0.46 ms in the server (docs/performance.md). Kept plans are the claim's
-- hazard too (webhook.prepare_claimed_events says why): PL/pgSQL keeps a
-- generic plan made while the log was small, and one planned so scanned the
-- whole log on every settlement after (test/db/claim-plans.test.ts saw it).
-- So, like the claim's functions, it runs with enable_seqscan off, every row
-- reached by key; and with jit off, since a plan costed with a disabled
-- scan anywhere below (a trigger's) looks dear enough to compile.
--
-- claim_settlements: [{sender_id, subscription_id, keep_claim, next_call_at, reset_failure_count}]
-- event_outcomes:    [{id, status, attempts, not_before}]
-- calls:             rows of webhook.delivery_attempts, without id

CREATE OR REPLACE FUNCTION webhook.settle_claims(claim_settlements jsonb, event_outcomes jsonb, calls jsonb) RETURNS void
  LANGUAGE plpgsql
  SET enable_seqscan = off
  SET jit = off
  AS $$
DECLARE
  -- Every table is reached by key through an array of ids: a join with
  -- jsonb_to_recordset's rows alone was planned as a scan of the whole table
  -- (the log: days of events).
  settled_subscription_ids uuid[] := ARRAY(SELECT (settlement ->> 'subscription_id')::uuid FROM jsonb_array_elements(claim_settlements) settlement);
  delivered_subscription_ids uuid[] := ARRAY(
    SELECT (settlement ->> 'subscription_id')::uuid FROM jsonb_array_elements(claim_settlements) settlement
    WHERE (settlement ->> 'reset_failure_count')::boolean);
  settled_event_ids bigint[] := ARRAY(SELECT (outcome ->> 'id')::bigint FROM jsonb_array_elements(event_outcomes) outcome);
BEGIN
  -- A delivery ends the subscription's run of refusals, and of deactivations (migration 0025).
  UPDATE webhook.subscriptions SET failure_count = 0, deactivations_in_a_row = 0, reactivation_not_before = NULL
  WHERE id = ANY (delivered_subscription_ids) AND (failure_count > 0 OR deactivations_in_a_row > 0);

  INSERT INTO webhook.delivery_attempts
    (subscription_id, kind, resource_type, resource_id, version_id, event_number, attempt, started_at, duration_ms, http_status, outcome, error, response_excerpt)
  SELECT * FROM jsonb_to_recordset(calls) AS call
    (subscription_id uuid, kind text, resource_type text, resource_id text, version_id integer, event_number bigint, attempt integer,
     started_at timestamptz, duration_ms integer, http_status integer, outcome text, error text, response_excerpt text);

  -- An event abandoned meanwhile (its subscription left `active`) stays so unless it was delivered or failed.
  UPDATE webhook.subscription_events event
  SET status = outcome.status, attempts = outcome.attempts, not_before = outcome.not_before,
      settled_at = CASE WHEN outcome.status = 'pending' THEN NULL ELSE now() END
  FROM jsonb_to_recordset(event_outcomes) AS outcome(id bigint, status text, attempts integer, not_before timestamptz)
  WHERE event.id = ANY (settled_event_ids) AND event.id = outcome.id
    AND (event.status = 'pending' OR outcome.status IN ('delivered', 'failed'));

  -- Only a throttled subscription's stream row is written (migration 0036 says why no more), and only
  -- while its sender still holds the claim: before the claims are released below.
  UPDATE webhook.subscription_streams stream
  SET next_call_at = settlement.next_call_at
  FROM jsonb_to_recordset(claim_settlements) AS settlement(sender_id text, subscription_id uuid, next_call_at timestamptz)
  WHERE stream.subscription_id = ANY (settled_subscription_ids) AND stream.subscription_id = settlement.subscription_id
    AND settlement.next_call_at IS NOT NULL
    AND EXISTS (SELECT FROM webhook.subscription_claims claim
                 WHERE claim.subscription_id = settlement.subscription_id AND claim.claimed_by = settlement.sender_id);

  -- Each claim is released only where its sender still holds it.
  DELETE FROM webhook.subscription_claims claim
  USING jsonb_to_recordset(claim_settlements) AS settlement(sender_id text, subscription_id uuid, keep_claim boolean)
  WHERE claim.subscription_id = ANY (settled_subscription_ids) AND claim.subscription_id = settlement.subscription_id
    AND claim.claimed_by = settlement.sender_id AND NOT settlement.keep_claim;
END
$$;
