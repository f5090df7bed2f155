-- FHIRPath `as` (and as()) on a choice element: its one item if it is of the
-- type, else empty, given the element's items of every type (`choice_items`)
-- and those of the type asked for (`typed_items`). More than one item is an
-- evaluation error (NULL).
CREATE OR REPLACE FUNCTION fhirpath.as_type(choice_items jsonb, typed_items jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE WHEN jsonb_array_length(choice_items) > 1 THEN NULL::jsonb ELSE typed_items END;
