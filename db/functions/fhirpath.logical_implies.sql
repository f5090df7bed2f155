-- FHIRPath `implies` over two Boolean collections: the right operand when
-- the left is true, true when the left is false, and when the left is empty,
-- true if the right is true, else empty. More than one item on either side is
-- an evaluation error (NULL), as is an error operand.
CREATE OR REPLACE FUNCTION fhirpath.logical_implies(left_operand jsonb, right_operand jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE
    WHEN jsonb_array_length(left_operand) > 1 OR jsonb_array_length(right_operand) > 1 THEN NULL::jsonb
    WHEN left_operand = '[true]' THEN right_operand
    WHEN left_operand = '[false]' THEN '[true]'::jsonb
    WHEN right_operand = '[true]' THEN '[true]'::jsonb
    ELSE '[]'::jsonb
  END;
