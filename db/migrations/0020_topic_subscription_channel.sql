-- Up Migration

-- What a topic-based subscription asks of its channel and its filters
-- (FHIR Subscriptions R5 Backport IG, the backport-subscription profile),
-- beside the topic (topic_id, migration 0019). A classic subscription has
-- none of them.
ALTER TABLE webhook.subscriptions
  -- Its filters as the client sent them (Subscription.criteria's
  -- backport-filter-criteria extensions, `Encounter?patient=Patient/123`),
  -- sorted: with the topic, they are what "one live subscription per
  -- criteria" compares. topic_filter holds them compiled.
  ADD COLUMN filter_criteria text[],
  -- How much of each event a notification carries (backport-payload-content):
  -- empty (nothing but the status), id-only (references), full-resource.
  ADD COLUMN payload_content text,
  -- backport-heartbeat-period: a heartbeat is sent when no notification went
  -- out for this many seconds.
  ADD COLUMN heartbeat_period_seconds integer,
  -- backport-timeout: how long the subscriber may take to answer a call
  -- (at most the service's DELIVERY_RESPONSE_TIMEOUT_MS, which applies when NULL).
  ADD COLUMN timeout_seconds integer,
  -- backport-max-count: at most this many events in one notification.
  ADD COLUMN max_count integer;

-- A topic-based subscription written by hand under 0019 (the API did not
-- take them yet) gets the IG's most common level, so that the constraints
-- below hold.
UPDATE webhook.subscriptions SET payload_content = 'id-only' WHERE topic_id IS NOT NULL;

ALTER TABLE webhook.subscriptions
  ADD CONSTRAINT subscriptions_payload_content_known CHECK (payload_content IN ('empty', 'id-only', 'full-resource')),
  ADD CONSTRAINT subscriptions_payload_content_on_a_topic CHECK ((payload_content IS NOT NULL) = (topic_id IS NOT NULL)),
  ADD CONSTRAINT subscriptions_channel_settings_on_a_topic
    CHECK (topic_id IS NOT NULL OR (filter_criteria IS NULL AND heartbeat_period_seconds IS NULL AND timeout_seconds IS NULL AND max_count IS NULL)),
  ADD CONSTRAINT subscriptions_heartbeat_period_positive CHECK (heartbeat_period_seconds > 0),
  ADD CONSTRAINT subscriptions_timeout_positive CHECK (timeout_seconds > 0),
  ADD CONSTRAINT subscriptions_max_count_positive CHECK (max_count > 0);

COMMENT ON COLUMN webhook.subscriptions.filter_criteria IS
  'A topic-based subscription''s filters as sent (backport-filter-criteria), sorted; NULL for a classic subscription.';
COMMENT ON COLUMN webhook.subscriptions.payload_content IS
  'A topic-based subscription''s payload level: empty, id-only or full-resource; NULL for a classic subscription.';

-- "At most one live subscription per criteria" (0002, 0011) now reads "per
-- criteria and filters": two subscriptions on one topic with different
-- filters are different subscriptions. For a classic subscription (no
-- filters) the digest is the criteria's, as before. The filters are encoded
-- as a JSON array, which no two different lists share.
-- IMMUTABLE, as an index expression must be: to_jsonb of a text array and
-- convert_to only depend on the database's encoding, which never changes.
CREATE FUNCTION webhook.criteria_and_filters_digest(criteria text, filter_criteria text[]) RETURNS bytea
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE WHEN filter_criteria IS NULL THEN webhook.criteria_digest(criteria)
              ELSE sha256(convert_to(jsonb_build_array(criteria, to_jsonb(filter_criteria))::text, 'UTF8')) END;

DROP INDEX webhook.subscriptions_one_live_per_criteria;

CREATE UNIQUE INDEX subscriptions_one_live_per_criteria
  ON webhook.subscriptions (webhook.criteria_and_filters_digest(criteria, filter_criteria))
  WHERE status IN ('requested', 'active');

-- A heartbeat goes to a subscription with a heartbeat period when no call
-- went to it for that long (webhook.claim_heartbeats): its calls are
-- recorded like the others, as kind heartbeat.
ALTER TABLE webhook.delivery_attempts
  DROP CONSTRAINT delivery_attempts_kind_check,
  ADD CONSTRAINT delivery_attempts_kind_known CHECK (kind IN ('handshake', 'notification', 'heartbeat'));

-- The senders look for heartbeats due every second: among the few active
-- subscriptions that have a period, not all of them.
CREATE INDEX subscriptions_with_heartbeat ON webhook.subscriptions (id) WHERE heartbeat_period_seconds IS NOT NULL AND status = 'active';

-- A topic-based subscription's events go in order: none is due while an
-- earlier one waits for its retry. The claim finds that one among the few
-- events waiting for a retry, not among all the pending ones.
CREATE INDEX subscription_events_waiting_for_retry ON webhook.subscription_events (subscription_id, id) WHERE status = 'pending' AND not_before IS NOT NULL;

-- For the DBA: each topic-based subscription with its topic, filters, payload
-- level and channel settings, and the number of its latest event (what
-- $status calls events-since-subscription-start).
CREATE VIEW webhook.topic_subscriptions AS
  SELECT s.id AS subscription_id, s.status, topic.url AS topic_url, topic.version AS topic_version, topic.status AS topic_status,
         s.filter_criteria, s.payload_content, s.heartbeat_period_seconds, s.timeout_seconds, s.max_count,
         stream.last_event_number, s.endpoint, s.error, s.created_at
  FROM webhook.subscriptions s
  JOIN webhook.subscription_topics topic ON topic.id = s.topic_id
  JOIN webhook.subscription_streams stream ON stream.subscription_id = s.id;

COMMENT ON VIEW webhook.topic_subscriptions IS
  'Topic-based subscriptions (FHIR Subscriptions Backport IG): topic, filters, payload content (empty, id-only, full-resource), heartbeat period, timeout and max-count, and the number of the latest event (credentials of the endpoint masked).';

-- Down Migration

DROP VIEW webhook.topic_subscriptions;

DROP INDEX webhook.subscription_events_waiting_for_retry;
DROP INDEX webhook.subscriptions_with_heartbeat;
DELETE FROM webhook.delivery_attempts WHERE kind = 'heartbeat';
ALTER TABLE webhook.delivery_attempts
  DROP CONSTRAINT delivery_attempts_kind_known,
  ADD CONSTRAINT delivery_attempts_kind_check CHECK (kind IN ('handshake', 'notification'));

DROP INDEX webhook.subscriptions_one_live_per_criteria;

CREATE UNIQUE INDEX subscriptions_one_live_per_criteria
  ON webhook.subscriptions (webhook.criteria_digest(criteria))
  WHERE status IN ('requested', 'active');

DROP FUNCTION webhook.criteria_and_filters_digest(text, text[]);

ALTER TABLE webhook.subscriptions
  DROP CONSTRAINT subscriptions_max_count_positive,
  DROP CONSTRAINT subscriptions_timeout_positive,
  DROP CONSTRAINT subscriptions_heartbeat_period_positive,
  DROP CONSTRAINT subscriptions_channel_settings_on_a_topic,
  DROP CONSTRAINT subscriptions_payload_content_on_a_topic,
  DROP CONSTRAINT subscriptions_payload_content_known,
  DROP COLUMN max_count,
  DROP COLUMN timeout_seconds,
  DROP COLUMN heartbeat_period_seconds,
  DROP COLUMN payload_content,
  DROP COLUMN filter_criteria;
