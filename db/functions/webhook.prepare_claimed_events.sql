-- The events of a claim (webhook.claim_subscription_events,
-- webhook.claim_more_subscription_events), before anything is sent:
--   * an event of a classic subscription is superseded (and settled so,
--     without a number) when the claim holds a newer version of its
--     resource, or the subscriber was already called with a newer one (a
--     retry that comes after the next version): a subscriber never receives
--     a version after a newer one. Only an event that may have been
--     overtaken is looked up in the calls made: one claimed before (it has a
--     number, or attempts), deferred (not_before), or recorded out of log
--     order (webhook.subscription_events.not_before says which). A fresh
--     event is claimed in log order, after every older event that was not
--     deferred: no newer version of its resource can have gone before it. A topic-based subscription's events are
--     changes, not states: each is sent, numbered, and the subscriber orders
--     them by their numbers;
--   * the events still without a number get their subscription's next
--     numbers, in log order: gapless from 1, kept across retries. The
--     subscription's stream row is not written (webhook.last_event_number
--     says why).
-- Returns the pending ones in the order to send them.
--
-- Each statement starts from the claimed rows, found by primary key (a
-- MATERIALIZED CTE with no other condition, so that no partial index of the
-- log's pending events can be chosen for them), and reaches the rest by
-- key. The plans then do not depend on the tables' statistics: on a log
-- that has grown since it was last analyzed (the first burst of a new
-- deployment; PostgreSQL 15), a bitmap scan of every pending event for 100
-- ids was chosen before, and the check of the calls already made read all of
-- a subscription's calls (delivery_attempts_by_subscription) instead of the
-- calls of one resource.
--
-- The claim's functions run with enable_seqscan off (this one,
-- webhook.claim_events_of_subscriptions, webhook.claim_more_subscription_events,
-- webhook.due_events_with_sizes): every row
-- they read is reached by key, whatever the statistics say. PL/pgSQL keeps a
-- statement's generic plan for the life of the connection, until the table
-- is analyzed; planned while the log was small (a new deployment; autovacuum
-- off, or held back by a long transaction), `e.id = ANY (batch)` was a
-- sequential scan of the log, and every claim then read the whole log, a
-- little more each minute (1.5 ms a statement after 9,000 events).
--
-- The claimed events' subscriptions are read once,
-- by key, into arrays, not joined to each event: with the subscriptions
-- table unanalyzed too, each event's join was a sequential scan of every
-- subscription (320 events by 1,000 subscriptions in a broad claim, twice).


CREATE OR REPLACE FUNCTION webhook.prepare_claimed_events(batch bigint[])
  RETURNS TABLE (subscription_id uuid, subscription_version integer, event_id bigint, event_number bigint,
                 resource_type text, resource_id text, version_id integer, deleted boolean, attempts integer)
  LANGUAGE plpgsql
  SET enable_seqscan = off
  AS $$
DECLARE
  subscription_ids uuid[];
  subscription_versions integer[];
  classic uuid[];
BEGIN
  SELECT array_agg(s.id), array_agg(s.version_id), coalesce(array_agg(s.id) FILTER (WHERE s.topic_id IS NULL), '{}')
  INTO subscription_ids, subscription_versions, classic
  FROM webhook.subscriptions s
  WHERE s.id = ANY (ARRAY(SELECT DISTINCT e.subscription_id FROM webhook.subscription_events e WHERE e.id = ANY (batch)));

  WITH claimed AS MATERIALIZED (
    SELECT e.id, e.subscription_id, e.resource_type, e.resource_id, e.version_id, e.status,
           e.attempts > 0 OR e.not_before IS NOT NULL OR e.event_number IS NOT NULL AS may_be_overtaken
    FROM webhook.subscription_events e
    WHERE e.id = ANY (batch)
  ), in_claim AS (
    SELECT claimed.*,
           max(claimed.version_id) OVER (PARTITION BY claimed.subscription_id, claimed.resource_type, claimed.resource_id) AS newest_claimed
    FROM claimed
    WHERE claimed.status = 'pending' AND claimed.subscription_id = ANY (classic)
  )
  UPDATE webhook.subscription_events e
  SET status = 'superseded', settled_at = now()
  FROM in_claim
  WHERE e.id = in_claim.id
    AND (in_claim.version_id < in_claim.newest_claimed
         OR in_claim.may_be_overtaken
            AND EXISTS (SELECT FROM webhook.delivery_attempts called
                         WHERE called.subscription_id = in_claim.subscription_id AND called.kind = 'notification'
                           AND called.resource_type = in_claim.resource_type AND called.resource_id = in_claim.resource_id
                           AND called.version_id > in_claim.version_id));

  -- The numbers follow each subscription's last number given, read from the
  -- log before this statement (webhook.last_event_number; the claim holds the
  -- subscription, so no other sender numbers its events meanwhile).
  WITH claimed AS MATERIALIZED (
    SELECT e.id, e.subscription_id, e.status, e.event_number
    FROM webhook.subscription_events e
    WHERE e.id = ANY (batch)
  ), fresh AS (
    SELECT claimed.id, claimed.subscription_id,
           row_number() OVER (PARTITION BY claimed.subscription_id ORDER BY claimed.id) AS n
    FROM claimed
    WHERE claimed.status = 'pending' AND claimed.event_number IS NULL
  ), numbered_before AS (
    SELECT numbering.subscription_id, webhook.last_event_number(numbering.subscription_id) AS last
    FROM (SELECT DISTINCT fresh.subscription_id FROM fresh) numbering
  )
  UPDATE webhook.subscription_events e
  SET event_number = numbered_before.last + fresh.n
  FROM fresh JOIN numbered_before ON numbered_before.subscription_id = fresh.subscription_id
  WHERE e.id = fresh.id;

  RETURN QUERY
    WITH claimed AS MATERIALIZED (
      SELECT e.subscription_id, e.id, e.event_number, e.resource_type, e.resource_id, e.version_id, e.deleted, e.attempts, e.status
      FROM webhook.subscription_events e
      WHERE e.id = ANY (batch)
    )
    SELECT claimed.subscription_id, s.version_id, claimed.id, claimed.event_number, claimed.resource_type, claimed.resource_id,
           claimed.version_id, claimed.deleted, claimed.attempts
    FROM claimed
    JOIN unnest(subscription_ids, subscription_versions) AS s(id, version_id) ON s.id = claimed.subscription_id
    WHERE claimed.status = 'pending'
    ORDER BY claimed.subscription_id, claimed.id;
END
$$;
