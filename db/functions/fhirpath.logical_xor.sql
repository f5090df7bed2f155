-- FHIRPath `xor` over two Boolean collections: empty if either is empty,
-- else whether exactly one is true. More than one item on either side is an
-- evaluation error (NULL), as is an error operand.
CREATE OR REPLACE FUNCTION fhirpath.logical_xor(left_operand jsonb, right_operand jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE
    WHEN jsonb_array_length(left_operand) > 1 OR jsonb_array_length(right_operand) > 1 THEN NULL::jsonb
    WHEN left_operand = '[]' OR right_operand = '[]' THEN '[]'::jsonb
    ELSE jsonb_build_array(left_operand <> right_operand)
  END;
