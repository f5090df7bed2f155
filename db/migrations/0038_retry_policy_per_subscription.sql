-- Up Migration

-- Issue 37, item 4: a retry policy per subscription. Until now every event
-- (and handshake) had DELIVERY_MAX_FAILURES attempts, spaced by
-- DELIVERY_RETRY_DELAYS_MS, whoever subscribed. A subscription may now say
-- its own number of attempts and its own backoff, within the operator's
-- bounds (RETRY_POLICY_*, checked by the API: src/subscriptions/retry-policy.ts).
-- NULL is the service's setting, so every subscription made before keeps
-- the behaviour it had.
ALTER TABLE webhook.subscriptions
  -- Attempts of one event before the subscription goes to error; also the
  -- notifications refused for good in a row that do (DELIVERY_MAX_FAILURES).
  ADD COLUMN max_attempts integer,
  -- The delay before the first retry, growing by retry_delay_growth at each
  -- one, never past retry_max_delay_ms: in place of DELIVERY_RETRY_DELAYS_MS.
  ADD COLUMN retry_first_delay_ms integer,
  ADD COLUMN retry_delay_growth numeric,
  ADD COLUMN retry_max_delay_ms integer,
  ADD CONSTRAINT subscriptions_max_attempts_positive CHECK (max_attempts > 0),
  ADD CONSTRAINT subscriptions_retry_backoff_whole CHECK (
    (retry_first_delay_ms IS NULL) = (retry_delay_growth IS NULL)
    AND (retry_first_delay_ms IS NULL) = (retry_max_delay_ms IS NULL)),
  ADD CONSTRAINT subscriptions_retry_backoff_sane CHECK (
    retry_first_delay_ms > 0 AND retry_delay_growth >= 1 AND retry_max_delay_ms >= retry_first_delay_ms);

COMMENT ON COLUMN webhook.subscriptions.max_attempts IS 'Attempts of an event (and of the handshake) before the subscription goes to error; NULL: DELIVERY_MAX_FAILURES.';
COMMENT ON COLUMN webhook.subscriptions.retry_first_delay_ms IS 'The delay before the first retry, in place of DELIVERY_RETRY_DELAYS_MS; NULL: those.';
COMMENT ON COLUMN webhook.subscriptions.retry_delay_growth IS 'What each retry''s delay is multiplied by for the next.';
COMMENT ON COLUMN webhook.subscriptions.retry_max_delay_ms IS 'The longest delay between two attempts.';

-- Down Migration

ALTER TABLE webhook.subscriptions
  DROP COLUMN max_attempts,
  DROP COLUMN retry_first_delay_ms,
  DROP COLUMN retry_delay_growth,
  DROP COLUMN retry_max_delay_ms;
