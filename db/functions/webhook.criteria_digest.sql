-- The SHA-256 of a criteria string: the unique index
-- webhook.subscriptions_one_live_per_criteria (migration 0011) is on it, so
-- that a criteria of any length fits a btree entry. Never change what it
-- returns: the index would disagree with it (a changed digest is a new
-- function and a new index, in a migration).
-- IMMUTABLE, as an index expression must be: convert_to is only STABLE
-- because it depends on the database's encoding, which never changes.
CREATE OR REPLACE FUNCTION webhook.criteria_digest(criteria text) RETURNS bytea
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN sha256(convert_to(criteria, 'UTF8'));
