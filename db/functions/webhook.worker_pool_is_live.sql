-- Whether a registration of webhook.worker_pools is live: heard from in the
-- last 20 seconds (its process beats every 5, src/dispatch/liveness.ts). One
-- rule for the sweep that frees the work of dead ones
-- (webhook.release_work_of_dead_worker_pools) and for the share each event
-- sender claims (webhook.claim_subscription_events).

CREATE OR REPLACE FUNCTION webhook.worker_pool_is_live(last_seen timestamptz)
  RETURNS boolean
  LANGUAGE sql
  STABLE
  AS $$
  SELECT last_seen >= now() - interval '20 seconds'
$$;
