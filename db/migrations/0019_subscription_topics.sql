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

-- Down Migration

DROP TABLE webhook.subscription_topics;
