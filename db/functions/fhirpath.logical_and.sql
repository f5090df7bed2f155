-- FHIRPath `and` over two Boolean collections (each empty or one item):
-- false if either is false, true if both are true, else empty. More than one
-- item on either side is an evaluation error (NULL), as is an error operand
-- (STRICT): FHIRPath evaluates both operands.
CREATE OR REPLACE FUNCTION fhirpath.logical_and(left_operand jsonb, right_operand jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE
    WHEN jsonb_array_length(left_operand) > 1 OR jsonb_array_length(right_operand) > 1 THEN NULL::jsonb
    WHEN left_operand = '[false]' OR right_operand = '[false]' THEN '[false]'::jsonb
    WHEN left_operand = '[true]' AND right_operand = '[true]' THEN '[true]'::jsonb
    ELSE '[]'::jsonb
  END;
