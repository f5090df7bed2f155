-- What FHIRPath's `<`, `<=`, `>` or `>=` (operator) says of two items in the
-- order `order_of` (-1, 0 or 1: the left one first, the same, the right one
-- first), for fhirpath.compare and fhirpath.date_times_compare.
CREATE OR REPLACE FUNCTION fhirpath.as_comparison(order_of integer, operator text) RETURNS boolean
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE operator
    WHEN '<' THEN order_of < 0
    WHEN '<=' THEN order_of <= 0
    WHEN '>' THEN order_of > 0
    WHEN '>=' THEN order_of >= 0
  END;
