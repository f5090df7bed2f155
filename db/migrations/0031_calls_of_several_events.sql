-- Up Migration

-- Since issue 28 a topic-based subscription with backport-max-count above 1
-- gets up to that many events in one notification, one call. Each event keeps
-- its own attempt rows, so that every event's history reads as before: a call
-- of N events is N rows of webhook.delivery_attempts with the same start,
-- duration, HTTP status and outcome, one per event (its event_number). The
-- comments said "every call"; they say now what a row is.
COMMENT ON TABLE webhook.delivery_attempts IS
  'Every attempt to deliver to a subscriber (handshakes, notifications, heartbeats), one row per event a call carried: a call of N events (backport-max-count) is N rows with the same started_at and outcome. Kept DELIVERY_LOG_RETENTION_DAYS days.';
COMMENT ON VIEW webhook.delivery_log IS
  'Every attempt to deliver to a subscriber (webhook.delivery_attempts: a call of N events is N rows with the same started_at) with what its subscription is: criteria, endpoint (credentials masked), status, failure count. Newest first: ORDER BY started_at DESC.';

-- Down Migration

COMMENT ON VIEW webhook.delivery_log IS
  'Every call to a subscriber (webhook.delivery_attempts) with what its subscription is: criteria, endpoint (credentials masked), status, failure count. Newest first: ORDER BY started_at DESC.';
COMMENT ON TABLE webhook.delivery_attempts IS
  'Every outbound webhook call (handshakes and notifications), kept DELIVERY_LOG_RETENTION_DAYS days.';
