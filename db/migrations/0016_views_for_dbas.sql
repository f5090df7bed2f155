-- Up Migration

-- Views for the DBA who is asked "why did this subscription stop?", "what is
-- waiting?", "was this resource delivered?". docs/dba.md has the queries;
-- test/dba.test.ts runs each of them.

COMMENT ON VIEW webhook.delivery_log IS
  'Every call to a subscriber (webhook.delivery_attempts) with what its subscription is: criteria, endpoint (credentials masked), status, failure count. Newest first: ORDER BY started_at DESC.';

-- Pending and retrying work per subscription, on top of graphile-worker's
-- queue (its public jobs view): the jobs whose key names a subscription
-- (handshake:<id>, reactivate:<id>); the alert e-mails and the daily cleanup
-- show without a subscription. (As first written, this view read
-- graphile-worker's private tables for the payloads of notification jobs,
-- which named their subscription; a new database would fail here once
-- graphile-worker changes them. Migration 0018 redefines the view on the
-- subscription event log.)
CREATE VIEW webhook.pending_work AS
  SELECT s.id AS subscription_id, s.criteria, s.endpoint, s.status,
         job.task_identifier AS task,
         count(*) AS jobs,
         count(*) AS events,
         count(*) FILTER (WHERE job.locked_at IS NULL AND job.run_at <= now()) AS waiting,
         count(*) FILTER (WHERE job.locked_at IS NULL AND job.run_at > now()) AS scheduled,
         count(*) FILTER (WHERE job.locked_at IS NOT NULL) AS running,
         min(job.run_at) FILTER (WHERE job.locked_at IS NULL AND job.run_at <= now()) AS waiting_since,
         min(job.run_at) FILTER (WHERE job.locked_at IS NULL AND job.run_at > now()) AS next_run_at,
         max(job.attempts) AS most_job_failures,
         (array_agg(job.last_error ORDER BY job.updated_at DESC) FILTER (WHERE job.last_error IS NOT NULL))[1] AS last_job_error
  FROM graphile_worker.jobs job
  LEFT JOIN webhook.subscriptions s ON s.id::text = substring(job.key FROM '^(?:handshake|reactivate):(.*)$')
  GROUP BY s.id, s.criteria, s.endpoint, s.status, job.task_identifier;

COMMENT ON VIEW webhook.pending_work IS
  'graphile-worker jobs per subscription and task: waiting (due, not taken), scheduled (due later: retries, delayed handshakes), running; the events they carry; since when the oldest waits.';

-- Subscriptions that are failing: in error, or whose latest call failed.
CREATE VIEW webhook.failing_subscriptions AS
  SELECT s.id AS subscription_id, s.criteria, s.endpoint, s.status, s.error, s.failure_count,
         latest.started_at AS last_attempt_at, latest.outcome AS last_outcome,
         latest.http_status AS last_http_status, latest.error AS last_attempt_error,
         (SELECT max(a.started_at) FROM webhook.delivery_attempts a WHERE a.subscription_id = s.id AND a.outcome = 'delivered') AS last_success_at,
         (SELECT count(*) FROM webhook.delivery_attempts a
           WHERE a.subscription_id = s.id AND a.outcome <> 'delivered' AND a.started_at > now() - interval '24 hours') AS failures_last_24h
  FROM webhook.subscriptions s
  LEFT JOIN LATERAL (
    SELECT a.started_at, a.outcome, a.http_status, a.error
    FROM webhook.delivery_attempts a
    WHERE a.subscription_id = s.id
    ORDER BY a.started_at DESC
    LIMIT 1
  ) latest ON true
  WHERE s.status = 'error' OR (s.status <> 'off' AND latest.outcome <> 'delivered');

COMMENT ON VIEW webhook.failing_subscriptions IS
  'Subscriptions in error, or not off and whose latest call failed: the reason, the latest attempt, the last success, failures in the last 24 hours.';

-- Down Migration

DROP VIEW webhook.failing_subscriptions;
DROP VIEW webhook.pending_work;
COMMENT ON VIEW webhook.delivery_log IS NULL;
