-- The active topic-based subscriptions one write notifies: those whose topic
-- has a resourceTrigger on the written type and interaction that fires
-- (webhook.topic_trigger_fires), and whose filters (topic_filter, for that
-- type) the resource passes: the version written, or for a delete the last
-- one. `previous` is NULL for a create, `current` NULL for a delete.

CREATE OR REPLACE FUNCTION webhook.topic_triggered_subscriptions(interaction text, written_type text, previous jsonb, current jsonb) RETURNS SETOF uuid
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $$
    SELECT s.id
    FROM webhook.subscriptions s
    JOIN webhook.subscription_topics topic ON topic.id = s.topic_id
    WHERE s.topic_id IS NOT NULL AND s.status = 'active'
      AND EXISTS (SELECT FROM jsonb_array_elements(topic.compiled -> 'triggers') AS trigger
                  WHERE trigger ->> 'resourceType' = written_type
                    AND trigger -> 'interactions' ? interaction
                    AND webhook.topic_trigger_fires(trigger, interaction, previous, current))
      AND webhook.notifies(written_type, coalesce(current, previous), (s.topic_filter ->> written_type)::jsonpath)
  $$;
