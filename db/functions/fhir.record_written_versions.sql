-- History is written once per statement from its transition table, so a
-- 20,000-row COPY costs one INSERT ... SELECT, not 20,000.
CREATE OR REPLACE FUNCTION fhir.record_written_versions() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO fhir.resource_history (resource_type, id, version_id, last_updated, is_deletion, content)
  SELECT resource_type, id, version_id, last_updated, false, content
    FROM written_rows;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER resources_record_inserted_versions
  AFTER INSERT ON fhir.resources
  REFERENCING NEW TABLE AS written_rows
  FOR EACH STATEMENT EXECUTE FUNCTION fhir.record_written_versions();

CREATE OR REPLACE TRIGGER resources_record_updated_versions
  AFTER UPDATE ON fhir.resources
  REFERENCING NEW TABLE AS written_rows
  FOR EACH STATEMENT EXECUTE FUNCTION fhir.record_written_versions();
