-- Up Migration

-- A subscription's criteria may be as long as a search's query (16,384
-- characters; each parameter bounded by the search parser). The index that
-- finds the subscriptions with a given criteria, newest first (a switch-off,
-- a search by criteria, webhook.subscription_is_superseded), was a btree on
-- the criteria text, whose entries hold at most 2,704 bytes: a longer
-- criteria failed its insert. It now holds the criteria's SHA-256, as the
-- one-live-per-criteria index does since migration 0011; the lookups
-- compare the digest (for the index) and the text (for the answer).

CREATE INDEX subscriptions_by_criteria_digest_and_creation
  ON webhook.subscriptions (webhook.criteria_digest(criteria), created_at);

DROP INDEX webhook.subscriptions_by_criteria_and_creation;

-- Down Migration

CREATE INDEX subscriptions_by_criteria_and_creation ON webhook.subscriptions (criteria, created_at);
DROP INDEX webhook.subscriptions_by_criteria_digest_and_creation;
