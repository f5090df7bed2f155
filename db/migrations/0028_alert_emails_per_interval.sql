-- Up Migration

-- A subscriber that answers its handshake but fails its notifications (a
-- health route that works, a handler that does not) flaps: each new event
-- reactivates it, the event fails, and it goes back to error. Each of those
-- deactivations recorded an alert and each alert was an e-mail: 20 such
-- subscribers sent 1,200 e-mails in 150 s (issue 27).
--
-- Every deactivation is still recorded here, one row each, and a
-- subscription's first alert still goes out at once, as the specification
-- says. Since this migration its contacts get at most one alert e-mail per
-- ALERT_EMAIL_INTERVAL_SECONDS (an hour by default): the deactivations after
-- an e-mail are told together in one e-mail at the interval's end, with their
-- count and the latest reason (src/dispatch/tasks/deactivation-alert.ts).
--
-- What became of a row (handled_as):
--   NULL           not told yet: its e-mail waits for the interval's end
--   sent, logged   its e-mail went out (logged: without SMTP_URL, or without
--                  contacts), telling of deactivations_told deactivations:
--                  this one and the rows folded into it
--   folded         told in a later row's e-mail (told_in)
ALTER TABLE webhook.deactivation_alerts
  ADD COLUMN deactivations_told integer,
  ADD COLUMN told_in bigint REFERENCES webhook.deactivation_alerts (id) ON DELETE CASCADE;

-- The alerts handled before this migration each told of their own deactivation.
UPDATE webhook.deactivation_alerts SET deactivations_told = 1 WHERE handled_as IS NOT NULL;

ALTER TABLE webhook.deactivation_alerts
  DROP CONSTRAINT deactivation_alerts_handled_as_check,
  ADD CONSTRAINT deactivation_alerts_handled_as_check CHECK (handled_as IN ('sent', 'logged', 'folded')),
  ADD CONSTRAINT deactivation_alerts_handled_when_at CHECK ((handled_as IS NULL) = (handled_at IS NULL)),
  ADD CONSTRAINT deactivation_alerts_told_count_when_told CHECK (((handled_as IN ('sent', 'logged')) IS TRUE) = (deactivations_told IS NOT NULL)),
  ADD CONSTRAINT deactivation_alerts_told_count_positive CHECK (deactivations_told >= 1),
  ADD CONSTRAINT deactivation_alerts_told_in_when_folded CHECK (((handled_as = 'folded') IS TRUE) = (told_in IS NOT NULL));

-- A subscription's alerts in order: the untold ones, its last e-mail, and its
-- deactivations of the last day (subscriptions list and show, the console).
CREATE INDEX deactivation_alerts_by_subscription ON webhook.deactivation_alerts (subscription_id, created_at);
-- Every subscription's deactivations of the last day, read at each scrape of
-- the metrics (fhir_webhooks_subscription_deactivations_last_day): the rows are
-- kept, and a year of a few flapping subscribers is millions of them.
CREATE INDEX deactivation_alerts_by_time ON webhook.deactivation_alerts (created_at);

COMMENT ON TABLE webhook.deactivation_alerts IS
  'One row per deactivation of a subscription (active -> error after failed deliveries); its contacts get at most one e-mail per ALERT_EMAIL_INTERVAL_SECONDS, telling of the deactivations since the last one.';
COMMENT ON COLUMN webhook.deactivation_alerts.handled_as IS
  'NULL: not told yet; sent or logged: its e-mail went out (or was logged), telling of deactivations_told deactivations; folded: told in the e-mail of row told_in.';
COMMENT ON COLUMN webhook.deactivation_alerts.deactivations_told IS
  'For a row whose e-mail went out: the deactivations it told of, this one included.';
COMMENT ON COLUMN webhook.deactivation_alerts.told_in IS
  'For a folded row: the row whose e-mail told of this deactivation.';

-- Down Migration

COMMENT ON COLUMN webhook.deactivation_alerts.handled_as IS NULL;
COMMENT ON TABLE webhook.deactivation_alerts IS NULL;
DROP INDEX webhook.deactivation_alerts_by_time;
DROP INDEX webhook.deactivation_alerts_by_subscription;
ALTER TABLE webhook.deactivation_alerts
  DROP CONSTRAINT deactivation_alerts_told_in_when_folded,
  DROP CONSTRAINT deactivation_alerts_told_count_positive,
  DROP CONSTRAINT deactivation_alerts_told_count_when_told,
  DROP CONSTRAINT deactivation_alerts_handled_when_at,
  DROP CONSTRAINT deactivation_alerts_handled_as_check;
-- A folded row was told, in another row's e-mail: the version before knows it as logged.
UPDATE webhook.deactivation_alerts SET handled_as = 'logged' WHERE handled_as = 'folded';
ALTER TABLE webhook.deactivation_alerts
  ADD CONSTRAINT deactivation_alerts_handled_as_check CHECK (handled_as IN ('sent', 'logged')),
  DROP COLUMN told_in,
  DROP COLUMN deactivations_told;
