-- Up Migration

-- A subscriber that answers its handshake but fails its notifications (a
-- health route that works, a handler that does not) flaps: each new event
-- reactivates it (the handshake succeeds), the event fails
-- DELIVERY_MAX_FAILURES times, and it goes back to error. Measured before
-- this migration: 20 such subscribers at 100 writes/s made 1,200 handshakes,
-- 3,600 failed calls and 1,200 deactivations in 150 s, and the healthy
-- subscribers beside them waited for it.
--
-- The specification's transitions stay: a subscription in error is
-- reactivated by an event, with a handshake. After its first deactivation the
-- next event does it, as the specification says; each time it goes back to
-- error (or fails a reactivation handshake) without a delivery in between,
-- the events of a while longer leave it in error: 1 s, 2 s, 4 s, ... up to
-- 5 minutes (webhook.reactivation_backoff). A delivery ends the run.
ALTER TABLE webhook.subscriptions
  ADD COLUMN deactivations_in_a_row integer NOT NULL DEFAULT 0,
  ADD COLUMN reactivation_not_before timestamptz,
  ADD CONSTRAINT subscriptions_deactivations_in_a_row_check CHECK (deactivations_in_a_row >= 0);

COMMENT ON COLUMN webhook.subscriptions.deactivations_in_a_row IS
  'Deactivations and failed reactivation handshakes since the subscription last delivered a notification.';
COMMENT ON COLUMN webhook.subscriptions.reactivation_not_before IS
  'While in error, events before this instant do not reactivate the subscription (webhook.reactivation_backoff of deactivations_in_a_row); NULL: the next event does.';

-- Since issue 26, not_before has a second use, which the claim reads
-- (webhook.prepare_claimed_events): an event recorded out of log order (a
-- reactivation's event, a notification job of the version before the log)
-- gets its recording time, so that the claim checks whether a newer version
-- of its resource was sent before it.
COMMENT ON COLUMN webhook.subscription_events.not_before IS
  'A retry waits until then (NULL: due now). Set too when the event was deferred or recorded out of log order: such an event may come after a newer version of its resource was sent, which its claim checks.';

-- Down Migration

COMMENT ON COLUMN webhook.subscription_events.not_before IS NULL;
ALTER TABLE webhook.subscriptions
  DROP CONSTRAINT subscriptions_deactivations_in_a_row_check,
  DROP COLUMN reactivation_not_before,
  DROP COLUMN deactivations_in_a_row;
