-- What "at most one live subscription per criteria and filters" compares:
-- the unique index webhook.subscriptions_one_live_per_criteria (migration
-- 0020) is on it. A classic subscription (no filters) digests its criteria
-- alone (webhook.criteria_digest); a topic-based one its topic with its
-- filters, encoded as a JSON array, which no two different lists share.
-- Never change what it returns: the index would disagree with it (a changed
-- digest is a new function and a new index, in a migration).
-- IMMUTABLE, as an index expression must be: to_jsonb of a text array and
-- convert_to only depend on the database's encoding, which never changes.
CREATE OR REPLACE FUNCTION webhook.criteria_and_filters_digest(criteria text, filter_criteria text[]) RETURNS bytea
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE WHEN filter_criteria IS NULL THEN webhook.criteria_digest(criteria)
              ELSE sha256(convert_to(jsonb_build_array(criteria, to_jsonb(filter_criteria))::text, 'UTF8')) END;
