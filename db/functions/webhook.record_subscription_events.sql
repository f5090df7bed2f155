-- The notification trigger: every statement on fhir.resources records the
-- events it makes, in the writing transaction. A write that commits has its
-- events; a write that rolls back has none. API writes and a loader's plain
-- SQL (INSERT, COPY, UPDATE, DELETE) are alike.
--
-- One statement-level run per statement matches all the rows it wrote:
--   * each (active subscription, matching resource version) becomes a row of
--     webhook.subscription_events, which the workers claim and send;
--   * a subscription in `error` (and not superseded) that a row matches gets
--     one subscription_reactivation job (job key reactivate:<id>: one pending
--     per subscription), through graphile-worker's public add_jobs, unless it
--     keeps failing and its reactivation_not_before is still ahead
--     (migration 0025).
--
-- Matching: `match` for creations and updates, `match_deleted` for deletions
-- (the spec evaluates only active, status and :missing there); NULL matches
-- all; `related_match` (chains, _has) for creations and updates. Of Bundles,
-- only documents notify (spec Events rule 4).
--
-- Cost grows with the subscriptions that can match a row, not with all of
-- them: subscriptions with match terms (webhook.subscription_match_terms) are
-- found by joining the terms with the values the rows hold at the terms'
-- paths, and only those candidates are evaluated in full; the others are
-- evaluated on every row of their type. For a statement of more than 100
-- rows, a chained criteria's first chain is looked up once, and the
-- references to its targets serve as its terms for the statement.
--
-- Wake-up: at most one NOTIFY per statement, and none for a statement that
-- matched nothing (webhook_subscription_events: eventsChannel in
-- src/dispatch/events/log.ts). A transaction that notified takes a
-- database-wide lock at commit; one per matching statement is the price of
-- millisecond delivery (docs/delivery.md: the writer's commit cost measured
-- with and without it).
--
-- Without JIT: the planner's estimates for a transition table of unknown size
-- joined with the terms run to millions of rows, past jit_above_cost, and
-- PostgreSQL spent 1.2 s compiling a query that runs in under a millisecond.

CREATE OR REPLACE FUNCTION webhook.record_subscription_events() RETURNS trigger
  LANGUAGE plpgsql
  SET jit = off
  AS $$
DECLARE
  deleting boolean := TG_OP = 'DELETE';
  -- Whether chains are matched through their targets' references (see above).
  bulk boolean := TG_OP <> 'DELETE' AND (SELECT count(*) > 100 FROM changed_rows);
  recorded bigint;
  reactivations graphile_worker.job_spec[];
BEGIN
  WITH chain_terms AS MATERIALIZED (
    -- For a bulk statement, the references to the resources each chained
    -- criteria's (first) chain leads to now, as terms at its reference paths.
    SELECT s.id AS subscription_id, s.resource_type, reference_path AS path, target.resource_type || '/' || target.id AS value
    FROM webhook.subscriptions s
    CROSS JOIN LATERAL jsonb_path_query_first(s.related_match, '$[*]."chain"') AS chain
    CROSS JOIN LATERAL jsonb_array_elements_text(chain -> 'references') AS reference_path
    CROSS JOIN LATERAL jsonb_array_elements(chain -> 'targets') AS target_criteria
    JOIN fhir.resources target
      ON target.resource_type = target_criteria ->> 'type'
     AND target.content @@ (target_criteria ->> 'match')::jsonpath
    WHERE bulk AND s.status = 'active' AND NOT s.has_match_terms
      AND s.resource_type IN (SELECT DISTINCT resource_type FROM changed_rows)
  ), terms AS (
    SELECT term.subscription_id, term.resource_type, term.path, term.value
    FROM webhook.subscription_match_terms term
    WHERE NOT deleting AND term.resource_type IN (SELECT DISTINCT resource_type FROM changed_rows)
    UNION ALL
    SELECT subscription_id, resource_type, path, value FROM chain_terms
  ), held AS MATERIALIZED (
    -- The values the written rows hold at the paths the terms use (a handful
    -- of distinct paths): one pass over the rows, then ONE hash join with the
    -- terms, rather than a lookup per row.
    SELECT c.resource_type, c.id, term_path.path, value #>> '{}' AS value
    FROM (SELECT DISTINCT resource_type, path FROM terms) term_path
    JOIN changed_rows c ON c.resource_type = term_path.resource_type
    CROSS JOIN LATERAL jsonb_path_query(c.content, term_path.path::jsonpath) AS value
  ), candidates AS MATERIALIZED (
    -- Each (subscription, row) once, however many of its terms the row holds.
    SELECT DISTINCT terms.subscription_id, held.resource_type, held.id
    FROM held
    JOIN terms USING (resource_type, path, value)
  ), matched AS (
    -- Subscriptions evaluated on every row of their type (OFFSET 0 keeps each
    -- subscription's jsonpath running over all rows in turn, its compiled
    -- regular expressions in PostgreSQL's small per-connection cache).
    SELECT s.id AS subscription_id, event.resource_type, event.id, event.version_id
    FROM webhook.subscriptions s
    CROSS JOIN LATERAL (
      SELECT c.resource_type, c.id, c.version_id
      FROM changed_rows c
      WHERE c.resource_type = s.resource_type
        AND webhook.notifies(c.resource_type, c.content, CASE WHEN deleting THEN s.match_deleted ELSE s.match END)
        AND (deleting OR s.related_match IS NULL OR fhir.related_resources_match(c.resource_type, c.id, c.content, s.related_match))
      OFFSET 0
    ) event
    WHERE s.status = 'active' AND (deleting OR NOT (s.has_match_terms OR (bulk AND coalesce(s.related_match @? '$[*]."chain"', false))))
    UNION ALL
    -- Subscriptions with terms: the full criteria, for their candidate rows
    -- only. The row is read back from fhir.resources by primary key (at the
    -- end of the statement that wrote it, it holds that version): a lookup
    -- per candidate, whatever the planner guesses of the CTE's size.
    SELECT s.id, c.resource_type, c.id, c.version_id
    FROM candidates
    JOIN fhir.resources c ON c.resource_type = candidates.resource_type AND c.id = candidates.id
    JOIN webhook.subscriptions s ON s.id = candidates.subscription_id
    WHERE s.status = 'active' AND (s.has_match_terms OR (bulk AND coalesce(s.related_match @? '$[*]."chain"', false)))
      AND webhook.notifies(c.resource_type, c.content, s.match)
      AND (s.related_match IS NULL OR fhir.related_resources_match(c.resource_type, c.id, c.content, s.related_match))
  )
  INSERT INTO webhook.subscription_events (subscription_id, resource_type, resource_id, version_id, deleted)
  SELECT subscription_id, resource_type, id,
         -- The deleted row holds its last version; the deletion is the next one.
         CASE WHEN deleting THEN version_id + 1 ELSE version_id END,
         deleting
  FROM matched
  -- A statement's rows in a stable order: a subscription is sent them in it.
  ORDER BY subscription_id, resource_type, id;
  GET DIAGNOSTICS recorded = ROW_COUNT;

  reactivations := array(
    SELECT ('subscription_reactivation', event.payload, NULL, NULL, NULL, 'reactivate:' || s.id, NULL, NULL)::graphile_worker.job_spec
    FROM webhook.subscriptions s
    CROSS JOIN LATERAL (
      SELECT webhook.event_payload(s.id, c.resource_type, c.id, c.version_id, deleting) AS payload
      FROM changed_rows c
      WHERE c.resource_type = s.resource_type
        AND webhook.notifies(c.resource_type, c.content, CASE WHEN deleting THEN s.match_deleted ELSE s.match END)
        AND (deleting OR s.related_match IS NULL OR fhir.related_resources_match(c.resource_type, c.id, c.content, s.related_match))
      LIMIT 1
    ) event
    WHERE s.status = 'error'
      AND (s.reactivation_not_before IS NULL OR s.reactivation_not_before <= now())
      AND NOT webhook.subscription_is_superseded(s.id));
  -- add_jobs notifies graphile-worker's workers even of no job: only when there is one.
  IF cardinality(reactivations) > 0 THEN
    PERFORM graphile_worker.add_jobs(reactivations);
  END IF;

  IF recorded > 0 THEN
    PERFORM pg_notify('webhook_subscription_events', '');
  END IF;
  RETURN NULL;
END
$$;

-- The same transition-table name for all three, so one function serves them.
CREATE OR REPLACE TRIGGER resources_record_subscription_events_on_insert
  AFTER INSERT ON fhir.resources
  REFERENCING NEW TABLE AS changed_rows
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.record_subscription_events();

CREATE OR REPLACE TRIGGER resources_record_subscription_events_on_update
  AFTER UPDATE ON fhir.resources
  REFERENCING NEW TABLE AS changed_rows
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.record_subscription_events();

CREATE OR REPLACE TRIGGER resources_record_subscription_events_on_delete
  AFTER DELETE ON fhir.resources
  REFERENCING OLD TABLE AS changed_rows
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.record_subscription_events();
