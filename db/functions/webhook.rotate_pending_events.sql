-- Empties the pending set's older generation (migration 0034): moves the
-- events still pending there into the current one, TRUNCATEs it, and makes
-- it the current one, so that the dead rows the claims may walk are those of
-- the last two periods, whatever snapshots are held. Only while the older
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

CREATE OR REPLACE FUNCTION webhook.rotate_pending_events(every interval, max_moved integer) RETURNS boolean
  LANGUAGE plpgsql
  SET lock_timeout = '20ms'
  AS $$
DECLARE
  current smallint;
  older text;
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
  EXECUTE format('SELECT count(*) > %s FROM (SELECT FROM %s LIMIT %s) still', max_moved, older, max_moved + 1) INTO too_many;
  IF too_many THEN
    RETURN false;
  END IF;
  BEGIN
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', older);
  EXCEPTION WHEN lock_not_available THEN
    RETURN false;
  END;
  EXECUTE format('INSERT INTO webhook.pending_events (generation, subscription_id, event_id)
                  SELECT %s, subscription_id, event_id FROM %s', current, older);
  EXECUTE format('TRUNCATE %s', older);
  UPDATE webhook.pending_events_generation SET current_generation = 1 - current, rotated_at = now();
  RETURN true;
END
$$;
