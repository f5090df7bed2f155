-- FHIRPath upper(), lower() and length() (function) of a string collection:
-- empty if it is empty; more than one item is an evaluation error (NULL).
-- Cases are mapped by ICU's root locale, whatever the database's collation, as
-- JavaScript maps them ('ß'.upper() is 'SS', 'İ'.lower() two characters); a
-- length counts UTF-16 code units, as fhirpath.js does ('😀' is 2).
CREATE OR REPLACE FUNCTION fhirpath.string_function(input jsonb, function text) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN CASE
    WHEN jsonb_array_length(input) > 1 THEN NULL::jsonb
    WHEN input = '[]' THEN '[]'::jsonb
    ELSE jsonb_build_array(CASE function
      WHEN 'upper' THEN to_jsonb(upper((input ->> 0) COLLATE "und-x-icu"))
      WHEN 'lower' THEN to_jsonb(lower((input ->> 0) COLLATE "und-x-icu"))
      WHEN 'length' THEN to_jsonb(fhirpath.length_in_utf16(input ->> 0))
    END)
  END;
