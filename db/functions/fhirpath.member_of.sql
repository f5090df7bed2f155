-- FHIRPath `in` (and `contains`, its operands swapped): whether the item of
-- `element` equals an item of `collection`, as fhirpath.equal compares
-- them. Empty if `element` is empty, false if `collection` is; more than one
-- item in `element` is an evaluation error (NULL).
CREATE OR REPLACE FUNCTION fhirpath.member_of(element jsonb, collection jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE
    WHEN jsonb_array_length(element) > 1 THEN NULL::jsonb
    WHEN element = '[]' THEN '[]'::jsonb
    ELSE jsonb_build_array(EXISTS (SELECT FROM jsonb_array_elements(collection) item WHERE item = element -> 0))
  END;
