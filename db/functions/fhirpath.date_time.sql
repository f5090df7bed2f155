-- A FHIRPath Date, DateTime or Time value as a resource or a literal writes it
-- ('2024', '2024-03-05', '2024-03-05T10:30:00.123+01:00', '10:30:00'), read
-- for comparison: an array whose first element is its precision, 0 to 5 for a
-- year, month, day, hour, minute and second (its fraction with it: FHIRPath
-- counts seconds and milliseconds as one precision), then, for each precision
-- up to its own, the value at that precision as seconds since 1970-01-01 UTC:
-- truncated below its own, exact (the fraction, the offset) at it.
--
-- A time is read on 1970-01-01 (precisions 3 to 5). A value without an offset
-- is read as UTC: a date has none, and a dateTime with a time has one in FHIR
-- (a FHIRPath literal may not); FHIRPath leaves that zone to the evaluation,
-- and this evaluation's is UTC (docs/topics.md). A leap second (:60) counts as
-- :59, as fhirpath.js counts it. The pattern is fhirpath.js's (and FHIR's), its
-- digits [0-9]: \d follows the database's collation, and under an ICU one takes
-- other scripts' digits, which the integer casts below would then refuse.
--
-- NULL when the text is none of these, or no such day (a loader's malformed
-- row): it then compares as nothing, and no error aborts the write.
--
-- PL/pgSQL, so that each part is read once: as one SQL expression, the
-- planner substituted the match into every use of it (90 matches a value).
CREATE OR REPLACE FUNCTION fhirpath.date_time(value text) RETURNS numeric[]
  LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
  part text[] := regexp_match(
    CASE WHEN value ~ '^T?[0-9][0-9](:|$)' THEN '1970-01-01T' || ltrim(value, 'T') ELSE value END,
    '^([0-9]{4})(?:-(0[1-9]|1[0-2])(?:-(0[1-9]|[12][0-9]|3[01])(?:T(?:([01][0-9]|2[0-3])(?::([0-5][0-9])(?::([0-5][0-9]|60)(\.[0-9]+)?)?)?'
    '(Z|[+-](?:0[0-9]|1[0-3]):[0-5][0-9]|[+-]14:00)?)?)?)?)?$');
  year integer := part[1]::integer;
  month integer := coalesce(part[2]::integer, 1);
  day integer := coalesce(part[3]::integer, 1);
  -- year, month, day, hour, minute, second: the parts written, less one.
  precision integer := num_nonnulls(part[2], part[3], part[4], part[5], part[6]);
  offset_minutes integer;
  utc timestamp;
BEGIN
  IF part IS NULL OR year < 1 OR day > extract(day FROM make_date(year, month, 1) + interval '1 month - 1 day') THEN
    RETURN NULL;
  END IF;
  offset_minutes := CASE
    WHEN part[8] IS NULL OR part[8] = 'Z' THEN 0
    ELSE (substr(part[8], 1, 1) || '1')::integer * (substr(part[8], 2, 2)::integer * 60 + substr(part[8], 5, 2)::integer)
  END;
  utc := make_timestamp(year, month, day, coalesce(part[4]::integer, 0), coalesce(part[5]::integer, 0), least(coalesce(part[6]::integer, 0), 59))
         - make_interval(mins => offset_minutes);
  RETURN (ARRAY[precision::numeric,
                extract(epoch FROM date_trunc('year', utc)),
                extract(epoch FROM date_trunc('month', utc)),
                extract(epoch FROM date_trunc('day', utc)),
                extract(epoch FROM date_trunc('hour', utc)),
                extract(epoch FROM date_trunc('minute', utc))])[1:precision + 1]
         || (extract(epoch FROM utc) + coalesce(('0' || part[7])::numeric, 0));
END;
$$;
