-- FHIRPath `~` of two Dates, two DateTimes or two Times (the compiler checks
-- they are of one type): of the same precision and the same instant (offsets
-- applied). Unlike `=`, never empty: 2024-03 ~ 2024-03-05 is false. A
-- malformed value is equivalent to nothing.
CREATE OR REPLACE FUNCTION fhirpath.date_times_equivalent(left_value text, right_value text) RETURNS boolean
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN coalesce((fhirpath.date_time(left_value))[1] = (fhirpath.date_time(right_value))[1]
                  AND fhirpath.date_time_order(left_value, right_value) = 0, false);
