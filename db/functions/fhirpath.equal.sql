-- FHIRPath `=` of two collections whose items the compiler has checked are
-- of one kind (strings, numbers, Booleans, or elements of one type): empty if
-- either is empty, false if their sizes differ, else whether each item equals
-- the other's at the same place. jsonb's equality is FHIRPath's for these:
-- strings exactly, numbers by value (1 = 1.0), elements child by child.
-- Dates and quantities, whose equality depends on precision and units, are
-- not compared here (the compiler refuses them).
CREATE OR REPLACE FUNCTION fhirpath.equal(left_operand jsonb, right_operand jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE
    WHEN left_operand = '[]' OR right_operand = '[]' THEN '[]'::jsonb
    ELSE jsonb_build_array(left_operand = right_operand)
  END;
