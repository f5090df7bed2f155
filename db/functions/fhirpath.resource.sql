-- %current or %previous: the collection of the version, or the empty one
-- where there is none (a create's previous, a delete's current). Not STRICT:
-- a missing version is no error.
CREATE OR REPLACE FUNCTION fhirpath.resource(version jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE WHEN version IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(version) END;
