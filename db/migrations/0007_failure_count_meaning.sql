-- Up Migration

-- Failures are counted per event (src/dispatch/tasks/notification.ts): each
-- event has DELIVERY_MAX_FAILURES attempts, and its last failed attempt
-- deactivates the subscription on its own. failure_count (whose comment in
-- 0002_subscriptions.sql predates this) now counts only the events in a row
-- that failed for good at once: a 4xx other than 429, or a refused address.

COMMENT ON COLUMN webhook.subscriptions.failure_count IS
  'Events in a row refused for good (a 4xx but 429, a refused address); a delivery resets it, and DELIVERY_MAX_FAILURES of them move the subscription to error. Retryable failures are counted per event, in the attempt records.';

-- Down Migration

COMMENT ON COLUMN webhook.subscriptions.failure_count IS NULL;
