-- FHIRPath last(): a collection of the last item of one, or empty.
CREATE OR REPLACE FUNCTION fhirpath.last(collection jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE WHEN collection = '[]' THEN '[]'::jsonb ELSE jsonb_build_array(collection -> -1) END;
