-- Whether every condition of a criteria's related_match holds for a resource
-- (NULL: no conditions). A condition is one of
--   {"chain": {"references": ["<jsonpath>", ...], "targets": [{"type": "Patient", "match": "<jsonpath>"}, ...]}}
--     some reference (each jsonpath selects reference strings) leads to a
--     resource of one of the targets' types that matches its jsonpath;
--   {"has": {"sourceType": "Observation", "referencing": "<jsonpath with $reference>", "match": "<jsonpath>"}}
--     some resource of sourceType refers to this one and matches.
-- (compileRelated in src/search/jsonpath.ts writes them.)
CREATE OR REPLACE FUNCTION fhir.related_resources_match(resource_type text, id text, content jsonb, conditions jsonb)
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
