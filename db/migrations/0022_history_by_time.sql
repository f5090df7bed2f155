-- Up Migration

-- Type and system history (GET /Patient/_history, GET /_history): every
-- version written since an instant, newest first, a page at a time. A
-- replica or an auditor reads changes this way. These indexes answer a page
-- (keyset: last_updated, then resource_type, id and version_id to break
-- ties) without reading the whole table: one for a type's history, one for
-- the system's. Instance history keeps using the primary key.
--
-- Each costs every write one more index entry per version. On an existing
-- large fhir.resource_history, building them takes a while and holds writes
-- to the table until it is done: run the upgrade in a quiet hour.

CREATE INDEX resource_history_by_type_and_time
  ON fhir.resource_history (resource_type, last_updated, id, version_id);

CREATE INDEX resource_history_by_time
  ON fhir.resource_history (last_updated, resource_type, id, version_id);

-- Down Migration

DROP INDEX fhir.resource_history_by_time;
DROP INDEX fhir.resource_history_by_type_and_time;
