-- Up Migration

-- Criteria that look at other resources: chained parameters
-- (Observation?subject:Patient.name=smith) and reverse chaining
-- (Patient?_has:Observation:patient:code=1234-5).
--
-- A subscription's `match` jsonpath reads the written resource alone. What a
-- criteria says about related resources is kept beside it, in
-- `related_match`, and evaluated by the trigger against the related
-- resources' current versions, inside the writing transaction: a chain sees
-- the Patient as it is when the Observation is written, including a Patient
-- written earlier in the same transaction. REST search uses the same two
-- functions (src/search/search.ts), so a search and a subscription with the
-- same criteria always agree.

-- Whether one of the references that `reference_path` selects in `content`
-- (strings "Type/id") names a current resource of `target_type` that matches
-- `target_match` (NULL: any). Looked up by primary key.
CREATE FUNCTION fhir.refers_to_matching(content jsonb, reference_path jsonpath, target_type text, target_match jsonpath)
  RETURNS boolean
  LANGUAGE sql STABLE PARALLEL SAFE
  -- Arguments are named with the function's name: inside the query, a bare
  -- name would be a column of fhir.resources first.
  RETURN EXISTS (
    SELECT 1
    FROM jsonb_path_query(refers_to_matching.content, refers_to_matching.reference_path) AS reference
    JOIN fhir.resources target
      ON target.resource_type = refers_to_matching.target_type
     AND target.id = substr(reference #>> '{}', length(refers_to_matching.target_type) + 2)
    WHERE starts_with(reference #>> '{}', refers_to_matching.target_type || '/')
      AND (refers_to_matching.target_match IS NULL
           OR coalesce(jsonb_path_match(target.content, refers_to_matching.target_match, '{}', true), false)));

COMMENT ON FUNCTION fhir.refers_to_matching(jsonb, jsonpath, text, jsonpath) IS
  'Chained search: does this resource refer (at reference_path) to a current target_type resource matching target_match?';

-- Whether a current resource of `source_type` refers to `resource_type/id`
-- where `referencing` says (a jsonpath with the placeholder $reference, such
-- as exists($."subject" ? (@."reference" == $reference))) and matches
-- `source_match`. The placeholder is replaced by the reference as a literal
-- rather than passed as a jsonpath variable, so that the GIN index on
-- content finds the referring resources.
CREATE FUNCTION fhir.referred_to_by_matching(resource_type text, id text, source_type text, referencing text, source_match jsonpath)
  RETURNS boolean
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN EXISTS (
    SELECT 1
    FROM fhir.resources source
    WHERE source.resource_type = referred_to_by_matching.source_type
      AND source.content @@ replace(referred_to_by_matching.referencing, '$reference',
                                    to_json(referred_to_by_matching.resource_type || '/' || referred_to_by_matching.id)::text)::jsonpath
      AND (referred_to_by_matching.source_match IS NULL
           OR coalesce(jsonb_path_match(source.content, referred_to_by_matching.source_match, '{}', true), false)));

COMMENT ON FUNCTION fhir.referred_to_by_matching(text, text, text, text, jsonpath) IS
  'Reverse chaining (_has): does a current source_type resource refer to this one (as referencing says) and match source_match?';

-- Whether every condition of a criteria's related_match holds for a resource
-- (NULL: no conditions). A condition is one of
--   {"chain": {"references": ["<jsonpath>", ...], "targets": [{"type": "Patient", "match": "<jsonpath>"}, ...]}}
--     some reference (each jsonpath selects reference strings) leads to a
--     resource of one of the targets' types that matches its jsonpath;
--   {"has": {"sourceType": "Observation", "referencing": "<jsonpath with $reference>", "match": "<jsonpath>"}}
--     some resource of sourceType refers to this one and matches.
-- (compileRelated in src/search/jsonpath.ts writes them.)
CREATE FUNCTION fhir.related_resources_match(resource_type text, id text, content jsonb, conditions jsonb)
  RETURNS boolean
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN related_resources_match.conditions IS NULL OR NOT EXISTS (
    SELECT 1
    FROM jsonb_array_elements(related_resources_match.conditions) AS condition
    WHERE NOT CASE
      WHEN condition ? 'chain' THEN EXISTS (
        SELECT 1
        FROM jsonb_array_elements_text(condition #> '{chain,references}') AS reference_path
        CROSS JOIN jsonb_array_elements(condition #> '{chain,targets}') AS target
        WHERE fhir.refers_to_matching(related_resources_match.content, reference_path::jsonpath,
                                      target ->> 'type', (target ->> 'match')::jsonpath))
      ELSE fhir.referred_to_by_matching(related_resources_match.resource_type, related_resources_match.id,
                                        condition #>> '{has,sourceType}', condition #>> '{has,referencing}',
                                        (condition #>> '{has,match}')::jsonpath)
    END);

ALTER TABLE webhook.subscriptions ADD COLUMN related_match jsonb;

COMMENT ON COLUMN webhook.subscriptions.related_match IS
  'What the criteria requires of related resources (chains, _has), evaluated by fhir.related_resources_match; NULL when nothing.';

-- 0008's function, with the related resources' conditions for creations and
-- updates (a deletion is matched by active, status and :missing only, as before).
-- fhir.related_resources_match has subqueries, so PostgreSQL cannot inline it:
-- it is called only for the subscriptions that have related conditions.
CREATE OR REPLACE FUNCTION webhook.enqueue_notifications() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  deleting boolean := TG_OP = 'DELETE';
  batch_size CONSTANT integer := 100;
BEGIN
  PERFORM graphile_worker.add_jobs(array(
    SELECT ('notification_delivery',
            json_build_object('subscriptionId', batch.subscription_id, 'events', batch.events),
            'subscription:' || batch.subscription_id,
            NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
    FROM (
      SELECT matched.subscription_id, json_agg(matched.event ORDER BY matched.n) AS events
      FROM (
        SELECT s.id AS subscription_id, event.event,
               row_number() OVER (PARTITION BY s.id ORDER BY event.resource_type, event.id) AS n
        FROM webhook.subscriptions s
        CROSS JOIN LATERAL (
          SELECT c.resource_type, c.id, webhook.batch_event(c.resource_type, c.id, c.version_id, deleting) AS event
          FROM changed_rows c
          WHERE c.resource_type = s.resource_type
            AND webhook.notifies(c.resource_type, c.content, CASE WHEN deleting THEN s.match_deleted ELSE s.match END)
            AND (deleting OR s.related_match IS NULL OR fhir.related_resources_match(c.resource_type, c.id, c.content, s.related_match))
          OFFSET 0
        ) event
        WHERE s.status = 'active'
      ) matched
      GROUP BY matched.subscription_id, (matched.n - 1) / batch_size
    ) batch
    UNION ALL
    SELECT ('subscription_reactivation', event.payload, NULL, NULL, NULL, 'reactivate:' || s.id, NULL, NULL)::graphile_worker.job_spec
    FROM webhook.subscriptions s
    CROSS JOIN LATERAL (
      SELECT webhook.event_payload(s.id, c.resource_type, c.id, c.version_id, deleting) AS payload
      FROM changed_rows c
      WHERE c.resource_type = s.resource_type
        AND webhook.notifies(c.resource_type, c.content, CASE WHEN deleting THEN s.match_deleted ELSE s.match END)
        AND (deleting OR s.related_match IS NULL OR fhir.related_resources_match(c.resource_type, c.id, c.content, s.related_match))
      LIMIT 1
    ) event
    WHERE s.status = 'error'
      AND NOT webhook.subscription_is_superseded(s.id)
  ));
  RETURN NULL;
END
$$;

-- Down Migration

-- 0008's function.
CREATE OR REPLACE FUNCTION webhook.enqueue_notifications() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  deleting boolean := TG_OP = 'DELETE';
  batch_size CONSTANT integer := 100;
BEGIN
  PERFORM graphile_worker.add_jobs(array(
    SELECT ('notification_delivery',
            json_build_object('subscriptionId', batch.subscription_id, 'events', batch.events),
            'subscription:' || batch.subscription_id,
            NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
    FROM (
      SELECT matched.subscription_id, json_agg(matched.event ORDER BY matched.n) AS events
      FROM (
        SELECT s.id AS subscription_id, event.event,
               row_number() OVER (PARTITION BY s.id ORDER BY event.resource_type, event.id) AS n
        FROM webhook.subscriptions s
        CROSS JOIN LATERAL (
          SELECT c.resource_type, c.id, webhook.batch_event(c.resource_type, c.id, c.version_id, deleting) AS event
          FROM changed_rows c
          WHERE c.resource_type = s.resource_type
            AND webhook.notifies(c.resource_type, c.content, CASE WHEN deleting THEN s.match_deleted ELSE s.match END)
          OFFSET 0
        ) event
        WHERE s.status = 'active'
      ) matched
      GROUP BY matched.subscription_id, (matched.n - 1) / batch_size
    ) batch
    UNION ALL
    SELECT ('subscription_reactivation', event.payload, NULL, NULL, NULL, 'reactivate:' || s.id, NULL, NULL)::graphile_worker.job_spec
    FROM webhook.subscriptions s
    CROSS JOIN LATERAL (
      SELECT webhook.event_payload(s.id, c.resource_type, c.id, c.version_id, deleting) AS payload
      FROM changed_rows c
      WHERE c.resource_type = s.resource_type
        AND webhook.notifies(c.resource_type, c.content, CASE WHEN deleting THEN s.match_deleted ELSE s.match END)
      LIMIT 1
    ) event
    WHERE s.status = 'error'
      AND NOT webhook.subscription_is_superseded(s.id)
  ));
  RETURN NULL;
END
$$;

ALTER TABLE webhook.subscriptions DROP COLUMN related_match;
DROP FUNCTION fhir.related_resources_match(text, text, jsonb, jsonb);
DROP FUNCTION fhir.referred_to_by_matching(text, text, text, text, jsonpath);
DROP FUNCTION fhir.refers_to_matching(jsonb, jsonpath, text, jsonpath);
