-- FHIRPath `or` over two Boolean collections (each empty or one item): true
-- if either is true, false if both are false, else empty. More than one item
-- on either side is an evaluation error (NULL), as is an error operand.
CREATE OR REPLACE FUNCTION fhirpath.logical_or(left_operand jsonb, right_operand jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE
    WHEN jsonb_array_length(left_operand) > 1 OR jsonb_array_length(right_operand) > 1 THEN NULL::jsonb
    WHEN left_operand = '[true]' OR right_operand = '[true]' THEN '[true]'::jsonb
    WHEN left_operand = '[false]' AND right_operand = '[false]' THEN '[false]'::jsonb
    ELSE '[]'::jsonb
  END;
