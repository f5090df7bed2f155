-- Up Migration

-- A claim is bounded by the bytes of the resource versions it holds as well
-- as by its events (DELIVERY_MAX_CLAIMED_BYTES): the claim functions take a
-- max_bytes argument and return, with each event, the bytes its version was
-- counted for and whether its subscription has due events left out. Their
-- signatures change, which CREATE OR REPLACE cannot do: the old ones are
-- dropped here, and db/functions creates the new ones after the migrations
-- (their record in webhook.applied_functions deleted, so that they are
-- applied whatever their text). A worker of the version before calls the old
-- signatures: its claims fail, logged and tried again every second, until it
-- is replaced; the events wait in the log meanwhile. (IF EXISTS: a new
-- database has no functions yet, db/functions comes after the migrations.)
DROP FUNCTION IF EXISTS webhook.claim_subscription_events(text, integer, integer);
DROP FUNCTION IF EXISTS webhook.claim_more_subscription_events(text, uuid, bigint, integer);
DELETE FROM webhook.applied_functions
WHERE file IN ('webhook.claim_subscription_events.sql', 'webhook.claim_more_subscription_events.sql');

-- Down Migration

-- The new signatures go; the version before creates its own from its
-- db/functions (their record deleted, so that they are applied again).
DROP FUNCTION webhook.claim_subscription_events(text, integer, integer, bigint);
DROP FUNCTION webhook.claim_more_subscription_events(text, uuid, bigint, integer, bigint);
DELETE FROM webhook.applied_functions
WHERE file IN ('webhook.claim_subscription_events.sql', 'webhook.claim_more_subscription_events.sql');
