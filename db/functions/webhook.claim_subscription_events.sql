-- A worker's claim in one statement: the subscriptions it may claim now
-- (webhook.subscriptions_to_claim: oldest pending event first, within its
-- share) claimed as webhook.claim_events_of_subscriptions claims them, up to
-- max_subscriptions. A sender that keeps the list between claims calls the
-- two itself (src/dispatch/events/sender.ts); this is the claim of tools and
-- tests, and of senders of an earlier release during an upgrade.

CREATE OR REPLACE FUNCTION webhook.claim_subscription_events(worker text, max_subscriptions integer, max_events integer, max_bytes bigint)
  RETURNS TABLE (subscription_id uuid, subscription_version integer, event_id bigint, event_number bigint,
                 resource_type text, resource_id text, version_id integer, deleted boolean, attempts integer,
                 bytes integer, more_due boolean)
  LANGUAGE plpgsql
  AS $$
DECLARE
  found record;
BEGIN
  SELECT * INTO found FROM webhook.subscriptions_to_claim(worker);
  RETURN QUERY SELECT * FROM webhook.claim_events_of_subscriptions(worker, found.candidates, least(max_subscriptions, found.share), max_events, max_bytes);
END
$$;
