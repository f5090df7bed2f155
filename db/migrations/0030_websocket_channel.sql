-- Up Migration

-- The websocket channel (FHIR Subscriptions R5 Backport IG, channel type
-- websocket; issue 28): a client that cannot host an endpoint (a browser
-- app, a service behind a firewall) opens a websocket to the API, asks
-- $get-ws-binding-token for a token, sends `bind-with-token <token>` and
-- receives its topic-based subscriptions' notifications as text frames.
-- Its events go through the same log, numbers, claims, retries and states
-- as a rest-hook subscription's: only the last step differs
-- (src/dispatch/websocket.ts, docs/delivery.md "The websocket channel").

-- How a subscription's notifications leave: rest-hook (a POST to its
-- endpoint) or websocket (the clients bound to it). A websocket subscription
-- is topic-based (classic subscriptions keep the specification's rest-hook
-- only); its endpoint column holds the websocket URL its clients connect to,
-- for the lists that show where a subscription's notifications go (the
-- Subscription resource shows none).
ALTER TABLE webhook.subscriptions
  ADD COLUMN channel_type text NOT NULL DEFAULT 'rest-hook';
ALTER TABLE webhook.subscriptions
  ADD CONSTRAINT subscriptions_channel_type_known CHECK (channel_type IN ('rest-hook', 'websocket')),
  ADD CONSTRAINT subscriptions_websocket_on_a_topic CHECK (channel_type = 'rest-hook' OR topic_id IS NOT NULL),
  DROP CONSTRAINT subscriptions_endpoint_check,
  ADD CONSTRAINT subscriptions_endpoint_check CHECK (endpoint ~ CASE channel_type WHEN 'websocket' THEN '^wss?://' ELSE '^https?://' END);
COMMENT ON COLUMN webhook.subscriptions.channel_type IS
  'rest-hook: notifications are POSTed to endpoint; websocket (topic-based only): they go to the clients bound to it, and endpoint is the websocket URL they connect to.';

-- An API process that holds websockets registers in webhook.worker_pools
-- like a worker process, with the same heartbeat: when it dies, the sweep
-- deletes its registration and, through the foreign key below, the bindings
-- of its clients.
ALTER TABLE webhook.worker_pools
  DROP CONSTRAINT worker_pools_kind_check,
  ADD CONSTRAINT worker_pools_kind_check CHECK (kind IN ('graphile-worker', 'event-sender', 'websocket-server'));
COMMENT ON COLUMN webhook.worker_pools.kind IS
  'graphile-worker: a graphile-worker pool (its id is what its jobs hold in locked_by); event-sender: a process sending subscription events (what webhook.subscription_streams.claimed_by holds); websocket-server: an API process holding websocket clients (what webhook.websocket_bindings.server_id holds).';

-- $get-ws-binding-token's tokens: each for the key that asked and the
-- subscriptions it named (all of them visible to that key then), for one
-- bind only, until expires_at. Only the token's SHA-256 is kept, as for API
-- keys: the token itself is shown once, in the operation's answer.
CREATE TABLE webhook.websocket_binding_tokens (
  token_sha256 text PRIMARY KEY CHECK (token_sha256 ~ '^[0-9a-f]{64}$'),
  api_key_id uuid NOT NULL REFERENCES webhook.api_keys (id) ON DELETE CASCADE,
  subscription_ids uuid[] NOT NULL CHECK (cardinality(subscription_ids) >= 1),
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  -- When a bind used it: a token binds once.
  used_at timestamptz
);
-- The tokens past their expiry, deleted as new ones are made.
CREATE INDEX websocket_binding_tokens_by_expiry ON webhook.websocket_binding_tokens (expires_at);
COMMENT ON TABLE webhook.websocket_binding_tokens IS
  '$get-ws-binding-token''s tokens (their SHA-256): each binds the subscriptions it names, for the key that asked, once, before expires_at.';

-- The websocket clients bound to each subscription, whichever API process
-- holds them: what a websocket send counts as its receivers, the per-key
-- connection limit counts, and the console shows. A client's rows go when
-- it closes, and with its process's registration when that process dies.
CREATE TABLE webhook.websocket_bindings (
  subscription_id uuid NOT NULL REFERENCES webhook.subscriptions (id) ON DELETE CASCADE,
  connection_id uuid NOT NULL,
  server_id text NOT NULL REFERENCES webhook.worker_pools (pool_id) ON DELETE CASCADE,
  api_key_id uuid NOT NULL REFERENCES webhook.api_keys (id) ON DELETE CASCADE,
  -- The client's address as the API saw it (behind a proxy, the proxy's).
  client_address text NOT NULL,
  bound_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (subscription_id, connection_id)
);
CREATE INDEX websocket_bindings_by_key ON webhook.websocket_bindings (api_key_id, connection_id);
CREATE INDEX websocket_bindings_by_server ON webhook.websocket_bindings (server_id);
COMMENT ON TABLE webhook.websocket_bindings IS
  'One row per websocket client bound to a subscription, held by the API process server_id (webhook.worker_pools).';

-- What a websocket subscription's sender hands to the API processes: each
-- notification once (a handshake, a heartbeat, an event notification),
-- written when at least one client is bound, read by every API process with
-- a client bound to it (woken by NOTIFY webhook_websocket_notifications, or
-- its poll each second) and written to each client's socket. A row is kept
-- a minute: the log (webhook.subscription_events) is the record, and a
-- client that missed a notification gets it with $events.
CREATE TABLE webhook.websocket_notifications (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  subscription_id uuid NOT NULL REFERENCES webhook.subscriptions (id) ON DELETE CASCADE,
  -- The notification's type (its status's type parameter).
  notification_type text NOT NULL CHECK (notification_type IN ('handshake', 'heartbeat', 'event-notification')),
  -- The highest event number the notification tells; NULL for a handshake or heartbeat.
  last_event_number bigint,
  -- The notification Bundle's JSON text, as the frame carries it.
  body text NOT NULL,
  published_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX websocket_notifications_by_subscription ON webhook.websocket_notifications (subscription_id, id);
CREATE INDEX websocket_notifications_by_time ON webhook.websocket_notifications (published_at);
COMMENT ON TABLE webhook.websocket_notifications IS
  'Websocket notifications on their way from a sender to the API processes holding the clients: kept a minute, the log being the record.';

-- Down Migration

DROP TABLE webhook.websocket_notifications;
DROP TABLE webhook.websocket_bindings;
DROP TABLE webhook.websocket_binding_tokens;
DELETE FROM webhook.worker_pools WHERE kind = 'websocket-server';
ALTER TABLE webhook.worker_pools
  DROP CONSTRAINT worker_pools_kind_check,
  ADD CONSTRAINT worker_pools_kind_check CHECK (kind IN ('graphile-worker', 'event-sender'));
COMMENT ON COLUMN webhook.worker_pools.kind IS
  'graphile-worker: a graphile-worker pool (its id is what its jobs hold in locked_by); event-sender: a process sending subscription events (what webhook.subscription_streams.claimed_by holds).';
-- The version before has no websocket channel: its subscriptions go, with their events and calls.
DELETE FROM webhook.subscription_events WHERE subscription_id IN (SELECT id FROM webhook.subscriptions WHERE channel_type = 'websocket');
DELETE FROM webhook.subscriptions WHERE channel_type = 'websocket';
ALTER TABLE webhook.subscriptions
  DROP CONSTRAINT subscriptions_endpoint_check,
  ADD CONSTRAINT subscriptions_endpoint_check CHECK (endpoint ~ '^https?://'),
  DROP CONSTRAINT subscriptions_websocket_on_a_topic,
  DROP CONSTRAINT subscriptions_channel_type_known,
  DROP COLUMN channel_type;
