-- FHIRPath exists() without criteria: whether a collection has any item.
CREATE OR REPLACE FUNCTION fhirpath.exists(collection jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN jsonb_build_array(collection <> '[]');
