-- FHIRPath `is` (and is()) on a choice element: whether its one item is of
-- the type, given the element's items of every type (`choice_items`) and those
-- of the type asked for (`typed_items`, the element's JSON name for it, as
-- ofType() reads them). Empty if there is no item; more than one is an
-- evaluation error (NULL).
CREATE OR REPLACE FUNCTION fhirpath.is_type(choice_items jsonb, typed_items jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE
    WHEN jsonb_array_length(choice_items) > 1 THEN NULL::jsonb
    WHEN choice_items = '[]' THEN '[]'::jsonb
    ELSE jsonb_build_array(typed_items <> '[]')
  END;
