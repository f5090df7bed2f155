-- Up Migration

-- "At most one live subscription per criteria string" (0002) was a unique
-- btree index on the string itself. A btree entry holds at most about
-- 2,700 bytes: a longer criteria failed the insert with an index error that
-- the API reported as a duplicate. The API now refuses criteria over 2,048
-- characters, but a character can take four bytes; the index is on the
-- string's SHA-256 instead, which fits whatever the length. Two different
-- criteria would have to collide in SHA-256 to be taken for one another.

-- IMMUTABLE, as an index expression must be: convert_to is only STABLE
-- because it depends on the database's encoding, which never changes.
CREATE FUNCTION webhook.criteria_digest(criteria text) RETURNS bytea
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN sha256(convert_to(criteria, 'UTF8'));

DROP INDEX webhook.subscriptions_one_live_per_criteria;

CREATE UNIQUE INDEX subscriptions_one_live_per_criteria
  ON webhook.subscriptions (webhook.criteria_digest(criteria))
  WHERE status IN ('requested', 'active');

-- Down Migration

DROP INDEX webhook.subscriptions_one_live_per_criteria;

CREATE UNIQUE INDEX subscriptions_one_live_per_criteria
  ON webhook.subscriptions (criteria)
  WHERE status IN ('requested', 'active');

DROP FUNCTION webhook.criteria_digest(text);
