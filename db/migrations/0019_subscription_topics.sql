-- Up Migration

-- Topics for topic-based subscriptions (FHIR R5 Subscriptions Backport IG on
-- R4). An operator adds a topic as an R5 SubscriptionTopic resource
-- (`npm run cli -- topics add FILE`); the service keeps the definition as
-- given, beside what it compiled from it (src/topics/): for each
-- resourceTrigger, its resource type, interactions and the previous/current
-- query criteria as jsonpath predicates, evaluated in the writing
-- transaction. A definition is never changed in place: a canonical's version
-- is immutable, and a changed topic is a new version.
CREATE TABLE webhook.subscription_topics (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  -- The topic's canonical URL and version (SubscriptionTopic.url, .version);
  -- a subscription names it as `url` or `url|version`.
  url text NOT NULL,
  version text,
  title text,
  -- active: subscriptions may be created on it. retired: no new ones; those
  -- that exist keep working (`npm run cli -- topics retire URL`).
  status text NOT NULL DEFAULT 'active',
  -- The SubscriptionTopic as the operator gave it, served to clients as is.
  definition jsonb NOT NULL,
  -- What the service compiled from it (src/topics/compile.ts, CompiledTopic).
  compiled jsonb NOT NULL,
  added_at timestamptz NOT NULL DEFAULT now(),
  retired_at timestamptz,
  CONSTRAINT subscription_topics_status_known CHECK (status IN ('active', 'retired')),
  CONSTRAINT subscription_topics_retired_since CHECK ((status = 'retired') = (retired_at IS NOT NULL)),
  -- One definition per canonical and version (a topic without a version is one too).
  CONSTRAINT subscription_topics_one_per_version UNIQUE NULLS NOT DISTINCT (url, version)
);

COMMENT ON TABLE webhook.subscription_topics IS
  'Topics for topic-based subscriptions: R5 SubscriptionTopic definitions added by an operator (npm run cli -- topics add), each with what the service compiled from it; retired topics take no new subscriptions.';

-- A subscription on a topic is a row of webhook.subscriptions like any other
-- (its handshake, delivery, event numbers and states are the same), with the
-- topic instead of a resource type: its events are recorded by
-- webhook.record_topic_events, not by the classic criteria's trigger, which
-- matches by resource_type.
ALTER TABLE webhook.subscriptions
  ADD COLUMN topic_id bigint REFERENCES webhook.subscription_topics (id),
  -- The subscription's filters (its filter-criteria, from the topic's
  -- canFilterBy), compiled per resource type: {"Encounter": "<jsonpath>"}; a
  -- type without an entry is not filtered.
  ADD COLUMN topic_filter jsonb,
  ALTER COLUMN resource_type DROP NOT NULL,
  ADD CONSTRAINT subscriptions_on_a_type_or_a_topic CHECK ((topic_id IS NULL) = (resource_type IS NOT NULL)),
  ADD CONSTRAINT subscriptions_topic_filter_only_on_a_topic CHECK (topic_filter IS NULL OR topic_id IS NOT NULL);

COMMENT ON COLUMN webhook.subscriptions.topic_id IS
  'The topic of a topic-based subscription (webhook.subscription_topics); NULL for a classic one, which has a resource_type instead.';

-- The notification trigger looks up the active subscriptions of a topic.
CREATE INDEX subscriptions_by_topic ON webhook.subscriptions (topic_id, status) WHERE topic_id IS NOT NULL;

-- Down Migration

DROP INDEX webhook.subscriptions_by_topic;
ALTER TABLE webhook.subscriptions
  DROP CONSTRAINT subscriptions_topic_filter_only_on_a_topic,
  DROP CONSTRAINT subscriptions_on_a_type_or_a_topic,
  DROP COLUMN topic_filter,
  DROP COLUMN topic_id,
  ALTER COLUMN resource_type SET NOT NULL;
DROP TABLE webhook.subscription_topics;
