-- FHIRPath `<`, `<=`, `>`, `>=` (operator) of two collections of one item
-- each, both strings or both numbers (the compiler checks): empty if either is
-- empty; more than one item on either side is an evaluation error (NULL).
-- Strings compare by code point (COLLATE "C"), not by the database's
-- collation: FHIRPath orders strings by their characters, whatever the locale.
CREATE OR REPLACE FUNCTION fhirpath.compare(left_operand jsonb, right_operand jsonb, operator text) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (
    SELECT CASE
      WHEN jsonb_array_length(left_operand) > 1 OR jsonb_array_length(right_operand) > 1 THEN NULL::jsonb
      WHEN left_operand = '[]' OR right_operand = '[]' THEN '[]'::jsonb
      WHEN order_of IS NULL THEN NULL::jsonb
      ELSE jsonb_build_array(fhirpath.as_comparison(order_of::integer, operator))
    END
    FROM (SELECT CASE
                   WHEN jsonb_typeof(left_operand -> 0) = 'number' AND jsonb_typeof(right_operand -> 0) = 'number'
                     THEN sign((left_operand ->> 0)::numeric - (right_operand ->> 0)::numeric)
                   -- Not two strings either: a loader's malformed row, compared as nothing (no error that would abort its write).
                   WHEN jsonb_typeof(left_operand -> 0) <> 'string' OR jsonb_typeof(right_operand -> 0) <> 'string' THEN NULL
                   WHEN (left_operand ->> 0) COLLATE "C" < (right_operand ->> 0) COLLATE "C" THEN -1
                   WHEN (left_operand ->> 0) = (right_operand ->> 0) THEN 0
                   ELSE 1
                 END AS order_of) ordered
  );
