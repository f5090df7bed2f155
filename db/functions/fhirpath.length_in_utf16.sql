-- A string's length in UTF-16 code units, as JavaScript counts it (FHIRPath's
-- length() in fhirpath.js): its characters, and one more for each outside the
-- Basic Multilingual Plane ('😀' is 2).
CREATE OR REPLACE FUNCTION fhirpath.length_in_utf16(value text) RETURNS integer
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN length(value) + length(regexp_replace(value, '[^\U00010000-\U0010FFFF]', '', 'g'));
