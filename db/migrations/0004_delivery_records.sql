-- Up Migration

-- What the dispatcher did: one row per outbound call (graphile-worker's own
-- tables are a queue, not a history), and one per deactivation alert.

CREATE TABLE webhook.delivery_attempts (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  subscription_id uuid NOT NULL REFERENCES webhook.subscriptions ON DELETE CASCADE,
  kind text NOT NULL CHECK (kind IN ('handshake', 'notification')),
  -- The resource version the call was about (none for a first handshake).
  resource_type text,
  resource_id text,
  version_id integer,
  -- 1 for the first call about this event, 2 for its first retry, ...
  attempt integer NOT NULL CHECK (attempt >= 1),
  started_at timestamptz NOT NULL,
  duration_ms integer NOT NULL CHECK (duration_ms >= 0),
  -- Absent when no HTTP response came (network error, timeout, refused address).
  http_status integer,
  -- delivered: 2xx. retrying: failed, another attempt is scheduled. failed: given up.
  outcome text NOT NULL CHECK (outcome IN ('delivered', 'retrying', 'failed')),
  error text,
  response_excerpt text CHECK (length(response_excerpt) <= 1024)
);

CREATE INDEX delivery_attempts_by_subscription ON webhook.delivery_attempts (subscription_id, started_at DESC);
-- The retention cleanup deletes by age.
CREATE INDEX delivery_attempts_by_start ON webhook.delivery_attempts (started_at);

COMMENT ON TABLE webhook.delivery_attempts IS
  'Every outbound webhook call (handshakes and notifications), kept DELIVERY_LOG_RETENTION_DAYS days.';

CREATE TABLE webhook.deactivation_alerts (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  subscription_id uuid NOT NULL REFERENCES webhook.subscriptions ON DELETE CASCADE,
  recipients text[] NOT NULL,
  reason text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  -- sent: handed to SMTP. logged: no SMTP_URL, written to the log instead.
  handled_as text CHECK (handled_as IN ('sent', 'logged')),
  handled_at timestamptz
);

-- For DBAs: the delivery history with what each subscription is.
CREATE VIEW webhook.delivery_log AS
  SELECT a.started_at, a.kind, a.outcome, a.http_status, a.error, a.attempt, a.duration_ms,
         a.resource_type, a.resource_id, a.version_id, a.response_excerpt,
         s.id AS subscription_id, s.criteria, s.endpoint, s.status AS subscription_status, s.failure_count
  FROM webhook.delivery_attempts a
  JOIN webhook.subscriptions s ON s.id = a.subscription_id;

-- Down Migration

DROP VIEW webhook.delivery_log;
DROP TABLE webhook.deactivation_alerts;
DROP TABLE webhook.delivery_attempts;
