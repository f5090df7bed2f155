-- FHIRPath `~` of two Dates, two DateTimes or two Times (the compiler checks
-- they are of one type): of the same precision and the same instant at it
-- (offsets applied). Unlike `=`, never empty: 2024-03 ~ 2024-03-05 is false. A
-- malformed value is equivalent to nothing. PL/pgSQL, so that each value is
-- read once (fhirpath.date_time).
CREATE OR REPLACE FUNCTION fhirpath.date_times_equivalent(left_value text, right_value text) RETURNS boolean
  LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
  left_parts numeric[] := fhirpath.date_time(left_value);
  right_parts numeric[] := fhirpath.date_time(right_value);
BEGIN
  -- A value's instant at its own precision is its element precision + 2.
  RETURN coalesce(left_parts[1] = right_parts[1] AND left_parts[left_parts[1]::integer + 2] = right_parts[right_parts[1]::integer + 2], false);
END;
$$;
