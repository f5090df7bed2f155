-- Assigns id (when the writer gave none), versionId and lastUpdated, and
-- writes them into the content. Runs before each row is stored, so the row's
-- constraints see the final values.
--
-- It also refuses a version whose type the API would not serve: a type
-- outside FHIR R4 (a typo such as 'Pateint'), or Subscription, which the
-- service keeps in webhook.subscriptions and creates through its API (with a
-- handshake). A batch loader writing SQL gets the refusal the API and the
-- loader give, and its statement writes nothing. Rows stored before this
-- check (migration 0027) stay: they can be read and deleted, not updated.
CREATE OR REPLACE FUNCTION fhir.stamp_resource_version() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    NEW.resource_type := coalesce(NEW.resource_type, NEW.content ->> 'resourceType');
  ELSIF NEW.resource_type IS DISTINCT FROM OLD.resource_type OR NEW.id IS DISTINCT FROM OLD.id THEN
    RAISE EXCEPTION 'a FHIR resource cannot change its type or id (% / %)', OLD.resource_type, OLD.id
      USING ERRCODE = 'check_violation';
  END IF;

  -- A missing resourceType (NULL) is left to the column's NOT NULL.
  IF NOT NEW.resource_type = ANY (fhir.r4_resource_types()) THEN
    RAISE EXCEPTION 'fhir.resources refuses resourceType ''%'': not a FHIR R4 resource type', NEW.resource_type
      USING ERRCODE = 'check_violation',
            HINT = 'The table takes the resource types of FHIR R4, spelled as they are, case included: SELECT unnest(fhir.r4_resource_types()).';
  END IF;
  IF NEW.resource_type = 'Subscription' THEN
    RAISE EXCEPTION 'fhir.resources refuses resourceType ''Subscription'': subscriptions are created through the API, not written to this table'
      USING ERRCODE = 'check_violation',
            HINT = 'POST the Subscription to the service at /fhir/resources/Subscription: it keeps subscriptions in webhook.subscriptions and makes their handshake.';
  END IF;

  IF TG_OP = 'INSERT' THEN
    NEW.id := coalesce(NEW.id, NEW.content ->> 'id', gen_random_uuid()::text);
    -- A resource re-created after its deletion continues its version sequence.
    NEW.version_id := 1 + coalesce(
      (SELECT max(h.version_id) FROM fhir.resource_history h
        WHERE h.resource_type = NEW.resource_type AND h.id = NEW.id),
      0);
  ELSE
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
