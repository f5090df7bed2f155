-- A compiled criteria's item of a Boolean element as an SQL boolean, NULL
-- (empty) when there is none. A value the model says is a Boolean but is not
-- (a loader's malformed row) is NULL too, never an error that would abort
-- the writing transaction.
CREATE OR REPLACE FUNCTION fhirpath.as_boolean(item jsonb) RETURNS boolean
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE WHEN jsonb_typeof(item) = 'boolean' THEN item::boolean END;
