-- Up Migration

-- A subscriber that can take only so many calls a second (an EHR interface
-- engine, say) is sent no more: the subscription's own limit (set at
-- creation, an extension on channel), else the service's
-- (DELIVERY_MAX_CALLS_PER_SECOND), else none. Enforced across worker
-- processes through the subscription's stream: a subscription is sent by one
-- sender at a time, which paces its calls, and leaves the earliest instant of
-- the next call for whoever claims it next.
ALTER TABLE webhook.subscriptions
  ADD COLUMN max_calls_per_second numeric,
  ADD CONSTRAINT subscriptions_max_calls_per_second_positive CHECK (max_calls_per_second > 0);

COMMENT ON COLUMN webhook.subscriptions.max_calls_per_second IS
  'At most this many calls a second to the subscriber (NULL: DELIVERY_MAX_CALLS_PER_SECOND, or no limit).';

ALTER TABLE webhook.subscription_streams
  ADD COLUMN next_call_at timestamptz;

COMMENT ON COLUMN webhook.subscription_streams.next_call_at IS
  'For a throttled subscription: the earliest its next call may start, left by the sender that sent the last one.';

-- Down Migration

ALTER TABLE webhook.subscription_streams DROP COLUMN next_call_at;
ALTER TABLE webhook.subscriptions
  DROP CONSTRAINT subscriptions_max_calls_per_second_positive,
  DROP COLUMN max_calls_per_second;
