-- FHIRPath first(): a collection of the first item of one, or empty.
CREATE OR REPLACE FUNCTION fhirpath.first(collection jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE WHEN collection = '[]' THEN '[]'::jsonb ELSE jsonb_build_array(collection -> 0) END;
