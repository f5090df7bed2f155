-- FHIRPath `<`, `<=`, `>`, `>=` (operator) of two collections of one Date,
-- DateTime or Time each (the compiler checks the types), in the order of
-- fhirpath.date_time_order: empty if either is empty or if the order cannot be
-- said (different precisions, the same at the lesser); more than one item on
-- either side is an evaluation error (NULL).
CREATE OR REPLACE FUNCTION fhirpath.date_times_compare(left_operand jsonb, right_operand jsonb, operator text) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (
    SELECT CASE
      WHEN jsonb_array_length(left_operand) > 1 OR jsonb_array_length(right_operand) > 1 THEN NULL::jsonb
      WHEN order_of IS NULL THEN '[]'::jsonb
      ELSE jsonb_build_array(fhirpath.as_comparison(order_of::integer, operator))
    END
    FROM (SELECT fhirpath.date_time_order(left_operand ->> 0, right_operand ->> 0) AS order_of) ordered
  );
