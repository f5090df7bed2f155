-- Up Migration

-- Issue 33, on reactivation.
--
-- One reactivation handshake per subscription at a time, whoever asks for it:
-- an event (the subscription_reactivation job), the API's $reactivate, the
-- console, the CLI. graphile-worker's job key keeps one reactivation job
-- pending per subscription, but a job added while another runs is a new job,
-- so concurrent writes made several handshakes at once (12 writes, 5
-- handshakes within 91 ms). Whoever sends the handshake first claims it here,
-- in one guarded UPDATE (src/subscriptions/state.ts claimReactivation); the
-- others wait for the claim's end and then find the subscription active, or
-- claim it for the next handshake. A claim ends with the handshake's record,
-- or by itself at its time: a process that died mid-handshake holds nobody up
-- for longer than one handshake may last.
ALTER TABLE webhook.subscriptions ADD COLUMN reactivation_claimed_until timestamptz;

COMMENT ON COLUMN webhook.subscriptions.reactivation_claimed_until IS
  'A reactivation handshake is in flight until then at most (one per subscription at a time); NULL: none.';

-- A failed reactivation handshake is no longer flapping: the subscriber did
-- not answer, so the next event sends the handshake again, as the
-- specification says (one at a time, above). Only a deactivation (the
-- handshake passed, then the notifications failed) counts towards the wait
-- of webhook.reactivation_backoff.
COMMENT ON COLUMN webhook.subscriptions.deactivations_in_a_row IS
  'Deactivations (active to error) since the subscription last delivered a notification; failed reactivation handshakes do not count.';

-- The CLI's `subscriptions reactivate` does not call the subscriber itself:
-- the handshake would carry the CLI shell's BASE_URL and go through its SSRF
-- and delivery settings, and a setting missing from that shell was recorded
-- as the subscriber's failure. It records a request here and enqueues a
-- subscription_reactivation_request job in the same transaction; a worker of
-- the running service sends the handshake with its own settings and writes
-- the outcome back on the row, which the CLI waits for, prints and deletes.
CREATE TABLE webhook.reactivation_requests (
  id uuid PRIMARY KEY,
  subscription_id uuid NOT NULL,
  -- The operating-system user who ran the command (the service's log names it).
  requested_by text NOT NULL CHECK (requested_by <> ''),
  requested_at timestamptz NOT NULL DEFAULT now(),
  -- NULL until a worker answered.
  outcome text CHECK (outcome IN ('reactivated', 'active meanwhile', 'not reactivated')),
  http_status integer,
  detail text,
  answered_at timestamptz,
  CONSTRAINT reactivation_requests_answered_whole CHECK ((outcome IS NULL) = (answered_at IS NULL))
);

COMMENT ON TABLE webhook.reactivation_requests IS
  'An operator''s `subscriptions reactivate` (CLI), carried out by a worker of the running service: the outcome and, when not reactivated, why. The CLI deletes its row once it has printed the outcome; the daily cleanup deletes those left behind.';
COMMENT ON COLUMN webhook.reactivation_requests.subscription_id IS
  'As the operator typed it: not a reference, so that an id that names nothing is answered (not known) by the worker, as the API answers it.';

-- Down Migration

DROP TABLE webhook.reactivation_requests;
COMMENT ON COLUMN webhook.subscriptions.deactivations_in_a_row IS
  'Deactivations and failed reactivation handshakes since the subscription last delivered a notification.';
ALTER TABLE webhook.subscriptions DROP COLUMN reactivation_claimed_until;
