-- The number of a subscription's latest numbered event (its events since
-- start: the Backport IG's events-since-subscription-start), read from the
-- log: its highest event_number, one probe at the top of
-- subscription_events_numbered_once, or the stream's floor
-- (webhook.subscription_streams.last_event_number) when retention or a
-- TRUNCATE has removed its numbered events.
--
-- Read, not kept: a claim numbered its events by advancing a counter in the
-- subscription's stream row, a new version of that row at every claim, and
-- while a snapshot is held (a DBA's long report) no version can be pruned,
-- so every lookup of the row walked them all (issue 35; docs/performance.md).
-- The log's index meets at most the few versions of its top event.
--
-- Numbers are given under the subscription's claim (webhook.prepare_claimed_events)
-- or its stream row's lock while unclaimed (webhook.number_missed_events):
-- one numberer at a time, each reading what the one before committed.

CREATE OR REPLACE FUNCTION webhook.last_event_number(subscription uuid) RETURNS bigint
  LANGUAGE sql STABLE
  RETURN greatest(
    (SELECT stream.last_event_number FROM webhook.subscription_streams stream WHERE stream.subscription_id = subscription),
    (SELECT e.event_number FROM webhook.subscription_events e
      WHERE e.subscription_id = subscription AND e.event_number IS NOT NULL
      ORDER BY e.event_number DESC LIMIT 1));
