-- FHIRPath not() of a Boolean collection: empty stays empty, true and false
-- swap; more than one item is an evaluation error (NULL).
CREATE OR REPLACE FUNCTION fhirpath.logical_not(operand jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE
    WHEN jsonb_array_length(operand) > 1 THEN NULL::jsonb
    WHEN operand = '[]' THEN '[]'::jsonb
    ELSE jsonb_build_array(operand <> '[true]')
  END;
