-- FHIRPath count(): the number of items of a collection.
CREATE OR REPLACE FUNCTION fhirpath.count(collection jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN jsonb_build_array(jsonb_array_length(collection));
