-- How long the events after a deactivation leave a subscription in error
-- (migration 0025), by the number of times in a row it went to error without
-- a delivery: after the first, none (the next event reactivates it, as the
-- specification says); then 1 s, 2 s, 4 s, ... up to 5 minutes. A flapping
-- subscriber (its handshake passes, its notifications fail) then costs a
-- handshake and its failed calls a few times an hour, not at every event. A
-- failed reactivation handshake does not count (migration 0033): the next
-- event sends it again, one at a time.
CREATE OR REPLACE FUNCTION webhook.reactivation_backoff(deactivations_in_a_row integer) RETURNS interval
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE WHEN deactivations_in_a_row <= 1 THEN interval '0'
              ELSE least(interval '1 second' * power(2, least(deactivations_in_a_row - 2, 16)), interval '5 minutes') END;
