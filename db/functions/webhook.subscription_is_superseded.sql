CREATE OR REPLACE FUNCTION webhook.subscription_is_superseded(subscription_id uuid) RETURNS boolean
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN EXISTS (
    SELECT 1
    FROM webhook.subscriptions this
    JOIN webhook.subscriptions newer ON newer.criteria = this.criteria AND newer.created_at > this.created_at
    WHERE this.id = subscription_is_superseded.subscription_id);
