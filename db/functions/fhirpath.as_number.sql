-- A compiled criteria's item of a number element as a numeric, NULL (empty)
-- when there is none. A value the model says is a number but is not (a
-- loader's malformed row) is NULL too, never an error that would abort the
-- writing transaction.
CREATE OR REPLACE FUNCTION fhirpath.as_number(item jsonb) RETURNS numeric
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE WHEN jsonb_typeof(item) = 'number' THEN item::numeric END;
