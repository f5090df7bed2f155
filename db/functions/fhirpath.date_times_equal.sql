-- FHIRPath `=` of two collections of Date, DateTime or Time values (the
-- compiler checks the types): empty if either is empty, false if their sizes
-- differ. One item each: whether fhirpath.date_time_order says 0, empty where
-- it cannot say. Several: true only if every pair at the same place is equal,
-- a pair that cannot be said counting as unequal (as fhirpath.js compares
-- collections of more than one item).
CREATE OR REPLACE FUNCTION fhirpath.date_times_equal(left_operand jsonb, right_operand jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE
    WHEN left_operand = '[]' OR right_operand = '[]' THEN '[]'::jsonb
    WHEN jsonb_array_length(left_operand) <> jsonb_array_length(right_operand) THEN '[false]'::jsonb
    WHEN jsonb_array_length(left_operand) = 1
      THEN (SELECT CASE WHEN order_of IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(order_of = 0) END
            FROM (SELECT fhirpath.date_time_order(left_operand ->> 0, right_operand ->> 0) AS order_of) ordered)
    ELSE jsonb_build_array((SELECT bool_and(coalesce(fhirpath.date_time_order(left_item, right_operand ->> (place::integer - 1)) = 0, false))
                            FROM jsonb_array_elements_text(left_operand) WITH ORDINALITY AS items(left_item, place)))
  END;
