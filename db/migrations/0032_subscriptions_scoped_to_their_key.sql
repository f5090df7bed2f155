-- Up Migration

-- One client's subscriptions are its own (issue 33).
--
-- "At most one live subscription per criteria" (0002, 0011, 0020) held for
-- the whole service: a second client asking for a criteria that another
-- client already had was refused, and the refusal named that subscription,
-- which the second client can neither see nor switch off. The rule now holds
-- per API key: each key may have one live (requested or active) subscription
-- per criteria and filters, as a single client always could; two keys may
-- each have their own. Subscriptions without a key (made before migration
-- 0013, or written in SQL) share one scope of their own: NULLS NOT DISTINCT
-- (PostgreSQL 15) makes NULL a value like any other here.
--
-- A single key sees exactly the specification's behaviour: its second live
-- subscription for a criteria is refused, and switching the criteria off
-- ends its own.
DROP INDEX webhook.subscriptions_one_live_per_criteria;

CREATE UNIQUE INDEX subscriptions_one_live_per_key_and_criteria
  ON webhook.subscriptions (created_by_api_key, webhook.criteria_and_filters_digest(criteria, filter_criteria)) NULLS NOT DISTINCT
  WHERE status IN ('requested', 'active');

COMMENT ON INDEX webhook.subscriptions_one_live_per_key_and_criteria IS
  'At most one live (requested or active) subscription per API key, criteria and filters: another key''s subscriptions neither block nor supersede a key''s own.';

-- A key made without naming its scopes (by code, or by a migration's default)
-- gets read and write: a client's scopes, which see only its own
-- subscriptions. admin (every client's subscriptions) is given only when
-- asked for by name (api-key create --scopes read,write,admin). Keys that
-- exist keep the scopes they have: those made before migration 0013 hold all
-- three, admin included (the upgrade notes in docs/operators.md say how to
-- find and narrow them).
ALTER TABLE webhook.api_keys ALTER COLUMN scopes SET DEFAULT ARRAY['read', 'write'];

-- Down Migration

ALTER TABLE webhook.api_keys ALTER COLUMN scopes SET DEFAULT ARRAY['read', 'write', 'admin'];

-- Fails while two keys each hold a live subscription for one criteria: switch
-- one of them off first (the rule going back is service-wide).
DROP INDEX webhook.subscriptions_one_live_per_key_and_criteria;

CREATE UNIQUE INDEX subscriptions_one_live_per_criteria
  ON webhook.subscriptions (webhook.criteria_and_filters_digest(criteria, filter_criteria))
  WHERE status IN ('requested', 'active');
