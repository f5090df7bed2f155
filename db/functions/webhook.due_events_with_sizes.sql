-- A subscription's due events after after_event and before events_before,
-- in log order, at most max_events, each with the size of its resource
-- version as the claims count it (webhook.claim_subscription_events,
-- webhook.claim_more_subscription_events; 0 for a version that is gone):
-- uncompressed, about the size of its JSON text, what the worker receives
-- and parses. pg_column_size() alone gives the stored size, which for a
-- compressed value is often 4 to 6 times smaller; only a compressed version
-- is decompressed to be counted (jsonb || '{}' gives back its left operand,
-- decompressed, without rebuilding it), an uncompressed one is counted from
-- its header, without reading it. The pending events are read from the
-- pending set (webhook.pending_events), each event and version by primary key.
-- PL/pgSQL, not SQL, for its cached plan: a claim calls it once per
-- subscription, and a SQL function's query is planned at every call (on
-- PostgreSQL before 18), 1 ms across the pending set's two partitions.
CREATE OR REPLACE FUNCTION webhook.due_events_with_sizes(subscription uuid, after_event bigint, events_before bigint, max_events integer)
  RETURNS TABLE (id bigint, size integer)
  LANGUAGE plpgsql STABLE
  -- Every row by key, whatever the statistics (webhook.prepare_claimed_events says why).
  SET enable_seqscan = off
  AS $$
  #variable_conflict use_column
  BEGIN
    RETURN QUERY
    SELECT e.id, coalesce(stored.size, 0)
    FROM (SELECT e.id, e.resource_type, e.resource_id, e.version_id
          FROM webhook.pending_events pending
          JOIN webhook.subscription_events e ON e.id = pending.event_id
          WHERE pending.subscription_id = subscription
            AND pending.event_id > after_event AND pending.event_id < events_before
            AND (e.not_before IS NULL OR e.not_before <= now())
          ORDER BY pending.event_id
          LIMIT max_events) e
    LEFT JOIN LATERAL (
      SELECT CASE WHEN pg_column_compression(h.content) IS NULL THEN pg_column_size(h.content)
                  ELSE pg_column_size(h.content || '{}') END AS size
      FROM fhir.resource_history h
      WHERE h.resource_type = e.resource_type AND h.id = e.resource_id AND h.version_id = e.version_id
    ) stored ON true
    ORDER BY e.id;
  END
  $$;
