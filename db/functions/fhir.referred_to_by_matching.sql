-- Whether a current resource of `source_type` refers to `resource_type/id`
-- where `referencing` says (a jsonpath with the placeholder $reference, such
-- as exists($."subject" ? (@."reference" == $reference))) and matches
-- `source_match`. The placeholder is replaced by the reference as a literal
-- rather than passed as a jsonpath variable, so that the GIN index on
-- content finds the referring resources.
CREATE OR REPLACE FUNCTION fhir.referred_to_by_matching(resource_type text, id text, source_type text, referencing text, source_match jsonpath)
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
