-- Up Migration

-- How many calls to one subscriber may be in flight at once: the
-- subscription's own number (set at creation, the parallel-calls extension
-- on channel), within the service's DELIVERY_PARALLEL_CALLS, which bounds
-- every subscription's; else a default that depends on its kind. A
-- topic-based subscription (Subscriptions R5 Backport IG) gets one call at a
-- time: its receiver reads the events by number, and with several calls in
-- flight a later event could arrive before an earlier one. A classic
-- subscription gets DELIVERY_PARALLEL_CALLS, as before. The API takes 1 to
-- 100; the constraint keeps out what means nothing (no call at all).
--
-- NULL for every existing subscription: the topic-based ones go one call at
-- a time from now on, the classic ones are sent as they were.
ALTER TABLE webhook.subscriptions
  ADD COLUMN parallel_calls integer,
  ADD CONSTRAINT subscriptions_parallel_calls_positive CHECK (parallel_calls > 0);

COMMENT ON COLUMN webhook.subscriptions.parallel_calls IS
  'At most this many calls in flight to the subscriber at once, within DELIVERY_PARALLEL_CALLS (NULL: 1 for a topic-based subscription, DELIVERY_PARALLEL_CALLS for a classic one).';

-- Down Migration

ALTER TABLE webhook.subscriptions
  DROP CONSTRAINT subscriptions_parallel_calls_positive,
  DROP COLUMN parallel_calls;
