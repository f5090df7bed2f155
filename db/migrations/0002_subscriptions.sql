-- Up Migration

-- Webhook subscriptions (FHIR R4 Subscription, channel rest-hook).
--
-- Kept in their own table, not in fhir.resources: they have secrets to hide,
-- a state machine the dispatcher drives, and a constraint no JSON column can
-- express. The API renders them as Subscription resources.

CREATE TYPE webhook.subscription_status AS ENUM ('requested', 'active', 'error', 'off');

CREATE TABLE webhook.subscriptions (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  -- The correlation key clients see as meta.tag[0].code.
  identifier uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
  status webhook.subscription_status NOT NULL,
  -- The criteria exactly as the client wrote it: the "one live subscription"
  -- rule compares this whole string.
  criteria text NOT NULL,
  resource_type text NOT NULL,
  -- The compiled criteria (src/search/criteria.ts), as stored JSON, and its two
  -- predicates as parsed jsonpath, ready for jsonb_path_match in triggers.
  compiled_criteria jsonb NOT NULL,
  match jsonpath,
  match_deleted jsonpath,
  endpoint text NOT NULL CHECK (endpoint ~ '^https?://'),
  payload text,
  -- channel.header as the client sent it, and the HMAC signing secret (the
  -- client's `secret` header, or one generated and never shown): AES-256-GCM
  -- ciphertexts (12-byte IV, 16-byte tag, data), so a reader of this table
  -- sees no secret.
  headers_encrypted bytea NOT NULL,
  signing_secret_encrypted bytea NOT NULL,
  secret_is_generated boolean NOT NULL,
  reason text NOT NULL,
  contact_emails text[] NOT NULL DEFAULT '{}',
  -- Why the subscription is in `error`.
  error text,
  -- When it was switched off (Subscription.end).
  ended_at timestamptz,
  -- Consecutive unsuccessful delivery attempts; a success resets it.
  failure_count integer NOT NULL DEFAULT 0 CHECK (failure_count >= 0),
  version_id integer NOT NULL DEFAULT 1,
  last_updated timestamptz NOT NULL DEFAULT clock_timestamp(),
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  CONSTRAINT subscriptions_end_only_when_off CHECK ((status = 'off') = (ended_at IS NOT NULL))
);

-- At most one live (requested or active) subscription per criteria string:
-- of two concurrent creates, the second fails here, whatever the application did.
CREATE UNIQUE INDEX subscriptions_one_live_per_criteria
  ON webhook.subscriptions (criteria)
  WHERE status IN ('requested', 'active');

-- The dispatcher's lookup: subscriptions that watch a resource type, by state.
CREATE INDEX subscriptions_by_resource_type ON webhook.subscriptions (resource_type, status);
-- Listing in creation order (the search's keyset).
CREATE INDEX subscriptions_by_creation ON webhook.subscriptions (created_at, id);

-- Every change is a new version with a new lastUpdated, whoever makes it.
CREATE FUNCTION webhook.stamp_subscription_version() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  NEW.version_id := OLD.version_id + 1;
  NEW.last_updated := clock_timestamp();
  RETURN NEW;
END
$$;

CREATE TRIGGER subscriptions_stamp_version
  BEFORE UPDATE ON webhook.subscriptions
  FOR EACH ROW EXECUTE FUNCTION webhook.stamp_subscription_version();

-- Down Migration

DROP TABLE webhook.subscriptions;
DROP FUNCTION webhook.stamp_subscription_version();
DROP TYPE webhook.subscription_status;
