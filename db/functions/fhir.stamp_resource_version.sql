-- Assigns id (when the writer gave none), versionId and lastUpdated, and
-- writes them into the content. Runs before each row is stored, so the row's
-- constraints see the final values.
CREATE OR REPLACE FUNCTION fhir.stamp_resource_version() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    NEW.resource_type := coalesce(NEW.resource_type, NEW.content ->> 'resourceType');
    NEW.id := coalesce(NEW.id, NEW.content ->> 'id', gen_random_uuid()::text);
    -- A resource re-created after its deletion continues its version sequence.
    NEW.version_id := 1 + coalesce(
      (SELECT max(h.version_id) FROM fhir.resource_history h
        WHERE h.resource_type = NEW.resource_type AND h.id = NEW.id),
      0);
  ELSE
    IF NEW.resource_type IS DISTINCT FROM OLD.resource_type OR NEW.id IS DISTINCT FROM OLD.id THEN
      RAISE EXCEPTION 'a FHIR resource cannot change its type or id (% / %)', OLD.resource_type, OLD.id
        USING ERRCODE = 'check_violation';
    END IF;
    NEW.version_id := OLD.version_id + 1;
  END IF;

  -- clock_timestamp(), not now(): versions written by one long transaction
  -- still get distinct, increasing instants.
  NEW.last_updated := clock_timestamp();
  NEW.content := fhir.with_version_meta(NEW.content, NEW.id, NEW.version_id, NEW.last_updated);
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER resources_stamp_version
  BEFORE INSERT OR UPDATE ON fhir.resources
  FOR EACH ROW EXECUTE FUNCTION fhir.stamp_resource_version();
