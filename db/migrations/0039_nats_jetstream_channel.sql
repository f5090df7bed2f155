-- Up Migration

-- The NATS JetStream channel (issue 37): a topic-based subscription's
-- notifications published to a subject of one of the operator's NATS brokers
-- (BROKERS), each delivered once the stream acknowledged it
-- (src/channels/nats-jetstream/). Its endpoint names the broker and the
-- subject, nats-jetstream://<broker>/<subject>: the broker's address and
-- credentials are the operator's configuration, never a subscription's.
-- Like websocket, it is for topic-based subscriptions only (classic ones keep
-- the specification's rest-hook).
ALTER TABLE webhook.subscriptions
  DROP CONSTRAINT subscriptions_channel_type_known,
  ADD CONSTRAINT subscriptions_channel_type_known CHECK (channel_type IN ('rest-hook', 'websocket', 'nats-jetstream')),
  DROP CONSTRAINT subscriptions_endpoint_check,
  ADD CONSTRAINT subscriptions_endpoint_check CHECK (endpoint ~ CASE channel_type
    WHEN 'websocket' THEN '^wss?://'
    WHEN 'nats-jetstream' THEN '^nats-jetstream://'
    ELSE '^https?://' END);
COMMENT ON COLUMN webhook.subscriptions.channel_type IS
  'rest-hook: notifications are POSTed to endpoint; websocket (topic-based only): they go to the clients bound to it, and endpoint is the websocket URL they connect to; nats-jetstream (topic-based only): they are published to the broker and subject endpoint names (nats-jetstream://<broker>/<subject>).';

-- Down Migration

DELETE FROM webhook.subscriptions WHERE channel_type = 'nats-jetstream';
ALTER TABLE webhook.subscriptions
  DROP CONSTRAINT subscriptions_endpoint_check,
  ADD CONSTRAINT subscriptions_endpoint_check CHECK (endpoint ~ CASE channel_type WHEN 'websocket' THEN '^wss?://' ELSE '^https?://' END),
  DROP CONSTRAINT subscriptions_channel_type_known,
  ADD CONSTRAINT subscriptions_channel_type_known CHECK (channel_type IN ('rest-hook', 'websocket'));
