-- Up Migration

-- fhir.resources took any resourceType from plain SQL: a row of 'Pateint', or
-- a Subscription, was stored, though the API serves neither (404 for a type
-- outside R4; a Subscription lives in webhook.subscriptions) and the loader
-- refuses both. From now on the table refuses them too: the BEFORE row
-- trigger (db/functions/fhir.stamp_resource_version.sql, applied after the
-- migrations) raises check_violation for a version whose type is not in
-- fhir.r4_resource_types() (db/functions/fhir.r4_resource_types.sql, the same
-- list as the API's), naming the type, and for a Subscription, pointing to
-- POST /fhir/resources/Subscription. One refused row fails its whole
-- statement (an INSERT of many rows, a COPY), as any constraint does.
--
-- A trigger rather than a CHECK constraint: it says which type and what to do
-- instead, where a CHECK's error names the constraint and prints the whole
-- row, the resource's JSON included. Rather than a foreign key to a table of
-- the types: that is a lookup per row, ~6.5 µs (a 100,000-row INSERT takes
-- ~0.65 s more), where the constant array the trigger compares with costs
-- ~0.2 µs (measured: db/functions/fhir.r4_resource_types.sql).
--
-- Rows already stored stay (the trigger checks what is written, this
-- migration checks nothing, so it cannot fail on them): they can still be read
-- and deleted with SQL, but not updated, as an update writes a new version.
-- To find them (docs/resource-store.md says what to do with them):
--   SELECT resource_type, count(*) FROM fhir.resources
--   WHERE NOT resource_type = ANY (fhir.r4_resource_types()) OR resource_type = 'Subscription'
--   GROUP BY resource_type;
COMMENT ON TABLE fhir.resources IS
  'Current version of each live FHIR resource. Batch loaders write here: supply content (with resourceType, an R4 resource type other than Subscription); id, versionId and lastUpdated are assigned by triggers.';

-- Down Migration

-- The version before puts back its own fhir.stamp_resource_version (its text
-- differs from the one applied) when it starts; fhir.r4_resource_types() stays,
-- unused.
COMMENT ON TABLE fhir.resources IS
  'Current version of each live FHIR resource. Batch loaders write here: supply content (with resourceType); id, versionId and lastUpdated are assigned by triggers.';
