-- A compiled criteria's item (a jsonb value, or NULL for none: %current on a
-- delete, a missing element) as a collection: the array of it, or the empty
-- one. Not STRICT: an item that is not there is no error.
CREATE OR REPLACE FUNCTION fhirpath.collection(item jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE WHEN item IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(item) END;
