-- Up Migration

-- Rotating a subscription's signing secret without a gap (issue 28).
--
-- Until now the only way to change a secret (it leaked, or policy says every
-- 90 days) was to switch the subscription off and create another, which drops
-- the events in between. Now the subscription's client (POST
-- .../Subscription/{id}/$rotate-secret) or an operator (npm run cli --
-- subscriptions rotate-secret) gives it a new secret, and for an overlap
-- (SECRET_ROTATION_OVERLAP_SECONDS, a day by default) every call is signed
-- with both: the receiver switches to the new secret at any time within it
-- (docs/receivers.md says how it verifies meanwhile).
--
-- The secret before the rotation is kept encrypted like the current one
-- (AES-256-GCM with SECRETS_ENCRYPTION_KEY, which the database does not have)
-- and is used only while previous_secret_until is ahead: the service checks it
-- when it signs a call. The next rotation replaces it.
ALTER TABLE webhook.subscriptions
  ADD COLUMN previous_signing_secret_encrypted bytea,
  ADD COLUMN previous_secret_until timestamptz,
  ADD CONSTRAINT subscriptions_previous_secret_has_an_end CHECK ((previous_signing_secret_encrypted IS NULL) = (previous_secret_until IS NULL));

COMMENT ON COLUMN webhook.subscriptions.previous_signing_secret_encrypted IS
  'The signing secret before the last rotation, AES-256-GCM (SECRETS_ENCRYPTION_KEY): calls are signed with it too until previous_secret_until. NULL: no rotation yet, or one without an overlap.';
COMMENT ON COLUMN webhook.subscriptions.previous_secret_until IS
  'The end of the last rotation''s overlap: after it, calls are signed with the current secret only.';

-- Who rotated which subscription's secret, and when: the audit trail. A row
-- never holds a secret, old or new (nor a digest of one, which would let a
-- reader test guesses).
CREATE TABLE webhook.secret_rotations (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  subscription_id uuid NOT NULL REFERENCES webhook.subscriptions (id) ON DELETE CASCADE,
  rotated_at timestamptz NOT NULL,
  -- The API key of the request ($rotate-secret), or the operating-system user
  -- who ran the CLI command: one of the two.
  rotated_by_api_key uuid REFERENCES webhook.api_keys (id),
  rotated_by_operator text,
  previous_secret_until timestamptz NOT NULL,
  CONSTRAINT secret_rotations_by_one CHECK ((rotated_by_api_key IS NULL) <> (rotated_by_operator IS NULL)),
  CONSTRAINT secret_rotations_operator_named CHECK (rotated_by_operator <> ''),
  CONSTRAINT secret_rotations_overlap_after_rotation CHECK (previous_secret_until >= rotated_at)
);

-- A subscription's rotations in order (the operator's question: who rotated it, when).
CREATE INDEX secret_rotations_by_subscription ON webhook.secret_rotations (subscription_id, rotated_at);

COMMENT ON TABLE webhook.secret_rotations IS
  'One row per rotation of a subscription''s signing secret: when, by which API key or operating-system user (CLI), and until when the previous secret signed calls too. Never a secret.';
COMMENT ON COLUMN webhook.secret_rotations.rotated_by_operator IS
  'The operating-system user who ran npm run cli -- subscriptions rotate-secret; NULL for a rotation through the API (rotated_by_api_key).';
COMMENT ON COLUMN webhook.secret_rotations.previous_secret_until IS
  'The end of the overlap: rotated_at when there was none.';

-- Down Migration

DROP TABLE webhook.secret_rotations;
-- The previous secrets go: the calls after this are signed with the current secret only.
ALTER TABLE webhook.subscriptions
  DROP CONSTRAINT subscriptions_previous_secret_has_an_end,
  DROP COLUMN previous_secret_until,
  DROP COLUMN previous_signing_secret_encrypted;
