-- FHIRPath empty(): whether a collection has no item.
CREATE OR REPLACE FUNCTION fhirpath.empty(collection jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN jsonb_build_array(collection = '[]');
