-- Whether a topic's resourceTrigger (an element of subscription_topics.compiled
-- -> 'triggers', a TopicTrigger of src/topics/compile.ts) fires for one write:
-- `interaction` create, update or delete; `previous` the version before the
-- write (NULL for a create), `current` the version written (NULL for a
-- delete). The caller has checked the resource type and the interaction.
--
-- Each test given decides on its version: previous on `previous` (for a
-- create, resultForCreate says), current on `current` (for a delete,
-- resultForDelete says). With requireBoth every test given must pass, else
-- one is enough; a trigger without tests fires on every such write. A test
-- is the compiled criteria's jsonpath, evaluated as webhook.notifies does
-- (NULL: every resource of the type passes).

CREATE OR REPLACE FUNCTION webhook.topic_trigger_fires(trigger jsonb, interaction text, previous jsonb, current jsonb) RETURNS boolean
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN (
    SELECT CASE
             WHEN previous_passes IS NULL AND current_passes IS NULL THEN true
             WHEN (trigger ->> 'requireBoth')::boolean THEN coalesce(previous_passes, true) AND coalesce(current_passes, true)
             ELSE coalesce(previous_passes, false) OR coalesce(current_passes, false)
           END
    FROM (SELECT
            CASE
              WHEN jsonb_typeof(trigger -> 'previous') IS DISTINCT FROM 'object' THEN NULL
              WHEN interaction = 'create' THEN trigger ->> 'resultForCreate' = 'test-passes'
              ELSE webhook.notifies(trigger ->> 'resourceType', previous, (trigger -> 'previous' ->> 'match')::jsonpath)
            END AS previous_passes,
            CASE
              WHEN jsonb_typeof(trigger -> 'current') IS DISTINCT FROM 'object' THEN NULL
              WHEN interaction = 'delete' THEN trigger ->> 'resultForDelete' = 'test-passes'
              ELSE webhook.notifies(trigger ->> 'resourceType', current, (trigger -> 'current' ->> 'match')::jsonpath)
            END AS current_passes) tests
  );
