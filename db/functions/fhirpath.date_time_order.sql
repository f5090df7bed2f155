-- FHIRPath's order of two Date, DateTime or Time values (fhirpath.date_time
-- reads them): -1, 0 or 1 at the lesser of their precisions, and NULL where
-- they differ in precision and are the same at the lesser one (2024-03 and
-- 2024-03-05: FHIRPath cannot say, and `=`, `<` and the like give empty), or
-- either is malformed. At the same precision they are compared exactly, their
-- offsets applied: 10:30:00Z equals 11:30:00+01:00. `=` is an order of 0, so
-- 2024-03 = 2024-04 is false and 2024-03 = 2024-03-05 empty, as FHIRPath says.
CREATE OR REPLACE FUNCTION fhirpath.date_time_order(left_value text, right_value text) RETURNS integer
  LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
  left_parts numeric[] := fhirpath.date_time(left_value);
  right_parts numeric[] := fhirpath.date_time(right_value);
  -- The lesser precision, where the two are compared: element precision + 2 is the value at it.
  compared_at integer := least(left_parts[1], right_parts[1])::integer + 2;
BEGIN
  IF left_parts IS NULL OR right_parts IS NULL THEN
    RETURN NULL;
  ELSIF left_parts[1] = right_parts[1] THEN
    RETURN sign(left_parts[compared_at] - right_parts[compared_at]);
  ELSE
    RETURN nullif(sign(left_parts[compared_at] - right_parts[compared_at]), 0);
  END IF;
END;
$$;
