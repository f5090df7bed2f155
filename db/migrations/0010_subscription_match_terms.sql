-- Up Migration

-- Matching whose cost grows with the subscriptions that can match a row, not
-- with all of them.
--
-- Before this, the notification trigger evaluated every row a statement
-- wrote against every active subscription of its type: a 20,000-row insert
-- with 1,000 subscriptions of `Appointment?actor=Practitioner/<id>` made
-- 20 million jsonpath evaluations to find 10,000 matches.
--
-- Most criteria require an equality term: a reference (actor=Practitioner/7),
-- a code (status=booked), an identifier's value, an id, a uri. A resource
-- that matches holds at least one of the criteria's terms (at least one of
-- its values, for `actor=Practitioner/7,Practitioner/8`), as a value at a
-- jsonpath. src/search/match-terms.ts works them out when the criteria is
-- compiled, into compiled_criteria.matchTerms; they are kept below, one row
-- per term. The trigger extracts, from each written row, the values at the
-- (few, distinct) paths the terms use, joins them with the terms, and
-- evaluates the full criteria only for the subscriptions found.
--
-- A chained criteria (patient.identifier=http://x|7) requires a reference to
-- one of the resources its chain leads to now. For a statement of more than
-- 100 rows, the trigger looks those up once (GIN) and uses the references as
-- the subscription's terms for the statement, rather than following every
-- row's references (a function call and a lookup per row and subscription).
--
-- Criteria without a term (a date range, a name, no filter at all), and
-- subscriptions created before this migration, are evaluated on every row as
-- before. Deletions, matched on active, status and :missing only, too.

CREATE TABLE webhook.subscription_match_terms (
  subscription_id uuid NOT NULL REFERENCES webhook.subscriptions ON DELETE CASCADE,
  resource_type text NOT NULL,
  -- A jsonpath selecting values in a resource, such as $."participant"."actor"."reference".
  path text NOT NULL,
  -- The value there, as text (#>> '{}': a JSON true is 'true').
  value text NOT NULL,
  PRIMARY KEY (resource_type, path, value, subscription_id)
);

COMMENT ON TABLE webhook.subscription_match_terms IS
  'Terms of which a resource matching the subscription''s criteria holds at least one (compiled_criteria.matchTerms): how the notification trigger finds candidate subscriptions.';

CREATE INDEX subscription_match_terms_by_subscription ON webhook.subscription_match_terms (subscription_id);

ALTER TABLE webhook.subscriptions
  ADD COLUMN has_match_terms boolean NOT NULL
    GENERATED ALWAYS AS (coalesce(jsonb_array_length(CASE jsonb_typeof(compiled_criteria -> 'matchTerms') WHEN 'array' THEN compiled_criteria -> 'matchTerms' END) > 0, false)) STORED;

COMMENT ON COLUMN webhook.subscriptions.has_match_terms IS
  'Whether webhook.subscription_match_terms lists the subscription''s terms; if not, every written row of its type is evaluated against it.';

-- A subscription's criteria never change: its terms are written once, with it.
CREATE FUNCTION webhook.record_match_terms() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO webhook.subscription_match_terms (subscription_id, resource_type, path, value)
  SELECT DISTINCT NEW.id, NEW.resource_type, term ->> 'path', term ->> 'value'
  FROM jsonb_array_elements(NEW.compiled_criteria -> 'matchTerms') AS term
  WHERE NEW.has_match_terms;
  RETURN NULL;
END
$$;

CREATE TRIGGER subscriptions_record_match_terms
  AFTER INSERT ON webhook.subscriptions
  FOR EACH ROW EXECUTE FUNCTION webhook.record_match_terms();

-- 0009's function, the active subscriptions' matches found in two parts:
-- those with terms through the terms the rows hold, the others row by row.
CREATE OR REPLACE FUNCTION webhook.enqueue_notifications() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  deleting boolean := TG_OP = 'DELETE';
  batch_size CONSTANT integer := 100;
  -- Whether chains are matched through their targets' references (see above).
  bulk boolean := TG_OP <> 'DELETE' AND (SELECT count(*) > 100 FROM changed_rows);
BEGIN
  PERFORM graphile_worker.add_jobs(array(
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
      -- The values the written rows hold at the paths the terms use (a
      -- handful of distinct paths): one pass over the rows, then ONE hash
      -- join with the terms, rather than a lookup per row.
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
      -- Subscriptions evaluated on every row of their type (OFFSET 0 keeps
      -- each subscription's jsonpath running over all rows in turn).
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
      -- only. The row is read back from fhir.resources by primary key (at
      -- the end of the statement that wrote it, it holds that version): a
      -- lookup per candidate, whatever the planner guesses of the CTE's size.
      SELECT s.id, c.resource_type, c.id, c.version_id
      FROM candidates
      JOIN fhir.resources c ON c.resource_type = candidates.resource_type AND c.id = candidates.id
      JOIN webhook.subscriptions s ON s.id = candidates.subscription_id
      WHERE s.status = 'active' AND (s.has_match_terms OR (bulk AND coalesce(s.related_match @? '$[*]."chain"', false)))
        AND webhook.notifies(c.resource_type, c.content, s.match)
        AND (s.related_match IS NULL OR fhir.related_resources_match(c.resource_type, c.id, c.content, s.related_match))
    )
    SELECT ('notification_delivery',
            json_build_object('subscriptionId', batch.subscription_id, 'events', batch.events),
            'subscription:' || batch.subscription_id,
            NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
    FROM (
      SELECT numbered.subscription_id, json_agg(numbered.event ORDER BY numbered.n) AS events
      FROM (
        SELECT matched.subscription_id,
               webhook.batch_event(matched.resource_type, matched.id, matched.version_id, deleting) AS event,
               row_number() OVER (PARTITION BY matched.subscription_id ORDER BY matched.resource_type, matched.id) AS n
        FROM matched
      ) numbered
      GROUP BY numbered.subscription_id, (numbered.n - 1) / batch_size
    ) batch
    UNION ALL
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
      AND NOT webhook.subscription_is_superseded(s.id)
  ));
  RETURN NULL;
END
$$;

-- Down Migration

-- 0009's function.
CREATE OR REPLACE FUNCTION webhook.enqueue_notifications() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  deleting boolean := TG_OP = 'DELETE';
  batch_size CONSTANT integer := 100;
BEGIN
  PERFORM graphile_worker.add_jobs(array(
    SELECT ('notification_delivery',
            json_build_object('subscriptionId', batch.subscription_id, 'events', batch.events),
            'subscription:' || batch.subscription_id,
            NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
    FROM (
      SELECT matched.subscription_id, json_agg(matched.event ORDER BY matched.n) AS events
      FROM (
        SELECT s.id AS subscription_id, event.event,
               row_number() OVER (PARTITION BY s.id ORDER BY event.resource_type, event.id) AS n
        FROM webhook.subscriptions s
        CROSS JOIN LATERAL (
          SELECT c.resource_type, c.id, webhook.batch_event(c.resource_type, c.id, c.version_id, deleting) AS event
          FROM changed_rows c
          WHERE c.resource_type = s.resource_type
            AND webhook.notifies(c.resource_type, c.content, CASE WHEN deleting THEN s.match_deleted ELSE s.match END)
            AND (deleting OR s.related_match IS NULL OR fhir.related_resources_match(c.resource_type, c.id, c.content, s.related_match))
          OFFSET 0
        ) event
        WHERE s.status = 'active'
      ) matched
      GROUP BY matched.subscription_id, (matched.n - 1) / batch_size
    ) batch
    UNION ALL
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
      AND NOT webhook.subscription_is_superseded(s.id)
  ));
  RETURN NULL;
END
$$;

DROP TRIGGER subscriptions_record_match_terms ON webhook.subscriptions;
DROP FUNCTION webhook.record_match_terms();
ALTER TABLE webhook.subscriptions DROP COLUMN has_match_terms;
DROP TABLE webhook.subscription_match_terms;
