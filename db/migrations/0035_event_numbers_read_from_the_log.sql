-- Up Migration

-- Issue 35, item 5: a claim no longer writes its subscription's stream row to
-- number events. A subscription's last number given is read from the log, at
-- the top of subscription_events_numbered_once
-- (db/functions/webhook.last_event_number.sql): while a snapshot is held, a
-- row written at every claim keeps every version, and each lookup by key
-- walked them all (docs/performance.md). What the column held until now is
-- what the log says (every number given is an event's), so it stays, as the
-- floor for when retention deletes a subscription's newest numbered events
-- (db/functions/webhook.keep_event_numbers_floor.sql raises it).
COMMENT ON COLUMN webhook.subscription_streams.last_event_number IS
  'A floor of the subscription''s event numbers: the highest number of its events deleted or truncated from the log. Its last number given is webhook.last_event_number(subscription_id), the greater of this and the log''s highest.';

-- The DBA's view reads the number as webhook.last_event_number does (this
-- migration runs before db/functions is applied, so it cannot call it).
CREATE OR REPLACE VIEW webhook.topic_subscriptions AS
  SELECT s.id AS subscription_id, s.status, topic.url AS topic_url, topic.version AS topic_version, topic.status AS topic_status,
         s.filter_criteria, s.payload_content, s.heartbeat_period_seconds, s.timeout_seconds, s.max_count,
         greatest(stream.last_event_number,
                  (SELECT e.event_number FROM webhook.subscription_events e
                    WHERE e.subscription_id = s.id AND e.event_number IS NOT NULL
                    ORDER BY e.event_number DESC LIMIT 1)) AS last_event_number,
         s.endpoint, s.error, s.created_at
  FROM webhook.subscriptions s
  JOIN webhook.subscription_topics topic ON topic.id = s.topic_id
  JOIN webhook.subscription_streams stream ON stream.subscription_id = s.id;

-- Down Migration

-- The version before numbers from the column: bring it up to the log first.
UPDATE webhook.subscription_streams stream
SET last_event_number = numbered.highest
FROM (SELECT e.subscription_id, max(e.event_number) AS highest FROM webhook.subscription_events e GROUP BY e.subscription_id) numbered
WHERE stream.subscription_id = numbered.subscription_id AND numbered.highest > stream.last_event_number;

COMMENT ON COLUMN webhook.subscription_streams.last_event_number IS NULL;

CREATE OR REPLACE VIEW webhook.topic_subscriptions AS
  SELECT s.id AS subscription_id, s.status, topic.url AS topic_url, topic.version AS topic_version, topic.status AS topic_status,
         s.filter_criteria, s.payload_content, s.heartbeat_period_seconds, s.timeout_seconds, s.max_count,
         stream.last_event_number, s.endpoint, s.error, s.created_at
  FROM webhook.subscriptions s
  JOIN webhook.subscription_topics topic ON topic.id = s.topic_id
  JOIN webhook.subscription_streams stream ON stream.subscription_id = s.id;
