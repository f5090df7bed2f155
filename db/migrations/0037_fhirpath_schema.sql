-- Up Migration

-- Issue 36: a topic's fhirPathCriteria is compiled to a SQL expression
-- (src/fhirpath/), which the topic trigger evaluates in the writing
-- transaction. The expression calls the functions of this schema
-- (db/functions/fhirpath.*.sql): FHIRPath's operators over collections.
--
-- A FHIRPath collection is a jsonb array of its items, as they are in the
-- resource's JSON; the empty collection is '[]'. An evaluation error (a
-- function that takes one item given several) is SQL NULL, which the
-- functions pass on (they are STRICT): a topic fires only on exactly
-- '[true]', so an error, like an empty or false result, does not fire.
CREATE SCHEMA fhirpath;
COMMENT ON SCHEMA fhirpath IS 'FHIRPath operators over collections (jsonb arrays; NULL an evaluation error), called by compiled fhirPathCriteria (src/fhirpath/).';

-- Down Migration

DROP SCHEMA fhirpath CASCADE;
