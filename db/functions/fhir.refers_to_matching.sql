-- Whether one of the references that `reference_path` selects in `content`
-- (strings "Type/id") names a current resource of `target_type` that matches
-- `target_match` (NULL: any). Looked up by primary key.
CREATE OR REPLACE FUNCTION fhir.refers_to_matching(content jsonb, reference_path jsonpath, target_type text, target_match jsonpath)
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
