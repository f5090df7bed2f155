-- Whether a newer subscription of the same API key has the same criteria
-- (for a topic-based one, the same topic and filters): a subscription in
-- error that is superseded is never reactivated, its successor being the
-- live one. Another key's subscriptions never supersede a key's own
-- (migration 0032: each key has its own live subscription per criteria);
-- subscriptions without a key supersede each other. The criteria are
-- compared by digest first (the index
-- subscriptions_by_criteria_digest_and_creation), then as text.
CREATE OR REPLACE FUNCTION webhook.subscription_is_superseded(subscription_id uuid) RETURNS boolean
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN EXISTS (
    SELECT 1
    FROM webhook.subscriptions this
    JOIN webhook.subscriptions newer
      ON webhook.criteria_digest(newer.criteria) = webhook.criteria_digest(this.criteria)
     AND newer.criteria = this.criteria AND newer.filter_criteria IS NOT DISTINCT FROM this.filter_criteria AND newer.created_at > this.created_at
     AND newer.created_by_api_key IS NOT DISTINCT FROM this.created_by_api_key
    WHERE this.id = subscription_is_superseded.subscription_id);
