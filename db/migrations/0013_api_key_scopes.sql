-- Up Migration

-- Scopes for API keys, and an owner for each subscription.
--
-- Before this, any key could read every subscription (with its secret and
-- Authorization header values) and switch off another client's. Now a key has
-- scopes: `read` (GET, searches), `write` (creates, updates, deletes,
-- Bundles, subscriptions) and `admin` (sees and switches off every
-- subscription). A key without `admin` sees and switches off only the
-- subscriptions it created. The one-live-subscription-per-criteria rule stays
-- global, as the spec says. Keys made before this keep every scope, as they
-- could do everything; subscriptions made before it have no owner and are
-- visible to `admin` keys only.

ALTER TABLE webhook.api_keys
  ADD COLUMN scopes text[] NOT NULL DEFAULT ARRAY['read', 'write', 'admin']
    CONSTRAINT api_keys_scopes_are_known CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['read', 'write', 'admin']);

COMMENT ON COLUMN webhook.api_keys.scopes IS
  'read: GET and searches; write: creates, updates, deletes, Bundles, subscriptions; admin: every subscription, not only those the key created.';

ALTER TABLE webhook.subscriptions
  ADD COLUMN created_by_api_key uuid REFERENCES webhook.api_keys (id);

COMMENT ON COLUMN webhook.subscriptions.created_by_api_key IS
  'The API key that created the subscription: keys without the admin scope see and switch off only their own. NULL for subscriptions created before migration 0013.';

CREATE INDEX subscriptions_by_creator ON webhook.subscriptions (created_by_api_key, created_at, id);

-- Down Migration

DROP INDEX webhook.subscriptions_by_creator;
ALTER TABLE webhook.subscriptions DROP COLUMN created_by_api_key;
ALTER TABLE webhook.api_keys DROP COLUMN scopes;
