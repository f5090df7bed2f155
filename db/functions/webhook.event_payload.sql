-- The payload of a subscription_reactivation job, built by the notification
-- trigger: resourceEvent in src/db/jobs.ts
-- (test/db/notification-triggers.test.ts checks that the two agree).
-- STABLE like json_build_object, so that it is inlined into the trigger's query.
CREATE OR REPLACE FUNCTION webhook.event_payload(subscription_id uuid, resource_type text, id text, version_id integer, deleted boolean)
  RETURNS json
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN json_build_object(
    'subscriptionId', subscription_id,
    'resourceType', resource_type,
    'resourceId', id,
    -- The deleted row holds its last version; the deletion is the next one.
    'versionId', CASE WHEN deleted THEN version_id + 1 ELSE version_id END,
    'deleted', deleted);
