-- FHIRPath startsWith(), endsWith(), contains() and matches() (test) of a
-- string collection against a string argument: empty if either is empty; more
-- than one item on either side is an evaluation error (NULL). An empty
-- argument string is found in any string, as in FHIRPath. For matches(), the
-- argument is the pattern as the compiler rewrote it for PostgreSQL
-- (src/fhirpath/regex.ts).
CREATE OR REPLACE FUNCTION fhirpath.string_test(input jsonb, argument jsonb, test text) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE
    WHEN jsonb_array_length(input) > 1 OR jsonb_array_length(argument) > 1 THEN NULL::jsonb
    WHEN input = '[]' OR argument = '[]' THEN '[]'::jsonb
    ELSE jsonb_build_array(CASE test
      WHEN 'startsWith' THEN starts_with(input ->> 0, argument ->> 0)
      WHEN 'endsWith' THEN right(input ->> 0, length(argument ->> 0)) = argument ->> 0
      WHEN 'contains' THEN strpos(input ->> 0, argument ->> 0) > 0
      WHEN 'matches' THEN (input ->> 0) ~ (argument ->> 0)
    END)
  END;
