-- Empties the older generation of the pending set (migration 0034) and of
-- the claims (migration 0036): moves the events still pending and the claims
-- still held there into the current one, TRUNCATEs it, and makes it the
-- current one, so that the dead rows the claims may walk are those of the
-- last two periods, whatever snapshots are held. Only while the older
-- generation holds few events (at most max_moved): the claims take the
-- oldest pending events first, so a backlog empties it before long, and a
-- rotation never copies a backlog around. At most once per
-- `every` across all processes (the generation row's lock decides who, and
-- one that finds it locked or too recent does nothing); each sender calls it
-- on its poll (src/dispatch/events/sender.ts). Returns whether it rotated.
--
-- Never a wait in the claims' path: the TRUNCATE needs the older partition
-- to itself, and a transaction that still reads or writes it (a claim in
-- flight, a writer that recorded events into it and has not committed, a
-- DBA's transaction that read the pending set) holds it. lock_timeout gives
-- up after 20 ms (the claims queued behind the waiting lock wait no longer);
-- the next poll tries again. While such a transaction lasts, the older
-- generation keeps its dead rows: the claims are then as before this table.
-- A REPEATABLE READ transaction that read the pending set before a
-- TRUNCATE sees that partition empty afterwards (TRUNCATE is not MVCC-safe):
-- the log, not this table, is what to report on.
--
-- A claim's check that no other sender holds the subscription reads the
-- claims in a statement whose snapshot is taken once its partitions are
-- locked (a volatile PL/pgSQL function's statement: webhook.claim_events_of_subscriptions),
-- so it waits for a rotation in flight and then sees the claims it moved.

CREATE OR REPLACE FUNCTION webhook.rotate_pending_events(every interval, max_moved integer) RETURNS boolean
  LANGUAGE plpgsql
  SET lock_timeout = '20ms'
  AS $$
DECLARE
  current smallint;
  older text;
  older_claims text;
  too_many boolean;
BEGIN
  SELECT g.current_generation INTO current
  FROM webhook.pending_events_generation g
  WHERE g.rotated_at <= now() - every
  FOR UPDATE SKIP LOCKED;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  older := format('webhook.pending_events_%s', 1 - current);
  older_claims := format('webhook.subscription_claims_%s', 1 - current);
  EXECUTE format('SELECT count(*) > %s FROM (SELECT FROM %s LIMIT %s) still', max_moved, older, max_moved + 1) INTO too_many;
  IF too_many THEN
    RETURN false;
  END IF;
  BEGIN
    EXECUTE format('LOCK TABLE %s, %s IN ACCESS EXCLUSIVE MODE', older, older_claims);
  EXCEPTION WHEN lock_not_available THEN
    RETURN false;
  END;
  EXECUTE format('INSERT INTO webhook.pending_events (generation, subscription_id, event_id)
                  SELECT %s, subscription_id, event_id FROM %s', current, older);
  EXECUTE format('INSERT INTO webhook.subscription_claims (generation, subscription_id, claimed_by, claimed_at)
                  SELECT %s, subscription_id, claimed_by, claimed_at FROM %s', current, older_claims);
  EXECUTE format('TRUNCATE %s, %s', older, older_claims);
  UPDATE webhook.pending_events_generation SET current_generation = 1 - current, rotated_at = now();
  RETURN true;
END
$$;
