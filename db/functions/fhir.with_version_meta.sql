-- The content with its id and meta.versionId/lastUpdated set (other meta kept).
CREATE OR REPLACE FUNCTION fhir.with_version_meta(content jsonb, id text, version_id integer, last_updated timestamptz)
  RETURNS jsonb
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN content || jsonb_build_object(
    'id', id,
    'meta', CASE WHEN jsonb_typeof(content -> 'meta') = 'object' THEN content -> 'meta' ELSE '{}'::jsonb END
            || jsonb_build_object('versionId', version_id::text, 'lastUpdated', fhir.format_instant(last_updated)));
