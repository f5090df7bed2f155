CREATE OR REPLACE FUNCTION fhir.record_deletions() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  deleted_at timestamptz := clock_timestamp();
BEGIN
  INSERT INTO fhir.resource_history (resource_type, id, version_id, last_updated, is_deletion, content)
  SELECT resource_type, id, version_id + 1, deleted_at, true,
         fhir.with_version_meta(content, id, version_id + 1, deleted_at)
    FROM deleted_rows;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER resources_record_deletions
  AFTER DELETE ON fhir.resources
  REFERENCING OLD TABLE AS deleted_rows
  FOR EACH STATEMENT EXECUTE FUNCTION fhir.record_deletions();
