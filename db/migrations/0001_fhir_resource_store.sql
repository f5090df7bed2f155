-- Up Migration

-- The FHIR resource store.
--
-- fhir.resources holds the current version of every live resource; a deleted
-- resource has no row here. fhir.resource_history holds every version ever
-- written, deletions included. Versioning is done by triggers, not by the
-- application, so a batch loader that writes fhir.resources with plain SQL
-- (INSERT, COPY, UPDATE, DELETE) gets exactly what an API client gets.

CREATE SCHEMA fhir;

-- FHIR instants carry microseconds; JavaScript dates do not, so the database
-- renders meta.lastUpdated itself, always in UTC.
-- STABLE like to_char, not IMMUTABLE: a SQL function is inlined into its
-- caller only when it claims no more than its body, and inlining is what keeps
-- the per-row trigger cheap (measured: 3.6x faster for 20,000 rows).
CREATE FUNCTION fhir.format_instant(instant timestamptz) RETURNS text
  LANGUAGE sql STABLE STRICT PARALLEL SAFE
  RETURN to_char(instant AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');

CREATE TABLE fhir.resources (
  resource_type text NOT NULL,
  id text NOT NULL,
  version_id integer NOT NULL,
  last_updated timestamptz NOT NULL,
  -- The resource as FHIR JSON, with id, meta.versionId and meta.lastUpdated
  -- kept equal to the columns above by fhir.stamp_resource_version().
  content jsonb NOT NULL,
  PRIMARY KEY (resource_type, id),
  CONSTRAINT resources_id_is_a_fhir_id CHECK (id ~ '^[A-Za-z0-9.-]{1,64}$'),
  CONSTRAINT resources_content_is_the_row CHECK (
    content ->> 'resourceType' = resource_type AND content ->> 'id' = id
  )
);

COMMENT ON TABLE fhir.resources IS
  'Current version of each live FHIR resource. Batch loaders write here: supply content (with resourceType); id, versionId and lastUpdated are assigned by triggers.';

-- Lists by type in update order (sorting, _lastUpdated, reconciliation).
CREATE INDEX resources_by_type_and_last_updated ON fhir.resources (resource_type, last_updated, id);
-- jsonb containment (@>) and jsonpath (@?, @@) searches on the content.
CREATE INDEX resources_content ON fhir.resources USING gin (content jsonb_path_ops);

CREATE TABLE fhir.resource_history (
  resource_type text NOT NULL,
  id text NOT NULL,
  version_id integer NOT NULL,
  last_updated timestamptz NOT NULL,
  -- A deletion is a version of its own: the content is the last live content,
  -- re-stamped with the deletion's versionId and lastUpdated.
  is_deletion boolean NOT NULL,
  content jsonb NOT NULL,
  PRIMARY KEY (resource_type, id, version_id)
);

COMMENT ON TABLE fhir.resource_history IS
  'Every version of every FHIR resource, written only by the triggers on fhir.resources.';

-- Assigns id (when the writer gave none), versionId and lastUpdated, and
-- writes them into the content. Runs before each row is stored, so the row's
-- constraints see the final values.
CREATE FUNCTION fhir.stamp_resource_version() RETURNS trigger
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

-- The content with its id and meta.versionId/lastUpdated set (other meta kept).
CREATE FUNCTION fhir.with_version_meta(content jsonb, id text, version_id integer, last_updated timestamptz)
  RETURNS jsonb
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN content || jsonb_build_object(
    'id', id,
    'meta', CASE WHEN jsonb_typeof(content -> 'meta') = 'object' THEN content -> 'meta' ELSE '{}'::jsonb END
            || jsonb_build_object('versionId', version_id::text, 'lastUpdated', fhir.format_instant(last_updated)));

CREATE TRIGGER resources_stamp_version
  BEFORE INSERT OR UPDATE ON fhir.resources
  FOR EACH ROW EXECUTE FUNCTION fhir.stamp_resource_version();

-- History is written once per statement from its transition table, so a
-- 20,000-row COPY costs one INSERT ... SELECT, not 20,000.
CREATE FUNCTION fhir.record_written_versions() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO fhir.resource_history (resource_type, id, version_id, last_updated, is_deletion, content)
  SELECT resource_type, id, version_id, last_updated, false, content
    FROM written_rows;
  RETURN NULL;
END
$$;

CREATE FUNCTION fhir.record_deletions() RETURNS trigger
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

CREATE TRIGGER resources_record_inserted_versions
  AFTER INSERT ON fhir.resources
  REFERENCING NEW TABLE AS written_rows
  FOR EACH STATEMENT EXECUTE FUNCTION fhir.record_written_versions();

CREATE TRIGGER resources_record_updated_versions
  AFTER UPDATE ON fhir.resources
  REFERENCING NEW TABLE AS written_rows
  FOR EACH STATEMENT EXECUTE FUNCTION fhir.record_written_versions();

CREATE TRIGGER resources_record_deletions
  AFTER DELETE ON fhir.resources
  REFERENCING OLD TABLE AS deleted_rows
  FOR EACH STATEMENT EXECUTE FUNCTION fhir.record_deletions();

-- API keys of the service's clients. Only a SHA-256 digest of each key is
-- kept: keys are 256-bit random strings, so a slow hash would add nothing.
CREATE SCHEMA webhook;

CREATE TABLE webhook.api_keys (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  name text NOT NULL CHECK (name <> ''),
  key_sha256 text NOT NULL UNIQUE CHECK (key_sha256 ~ '^[0-9a-f]{64}$'),
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);

-- Down Migration

DROP SCHEMA webhook CASCADE;
DROP SCHEMA fhir CASCADE;
