-- Up Migration

-- The RabbitMQ channel (AMQP 0-9-1; issue 37): a topic-based subscription's
-- notifications published to an exchange of one of the operator's RabbitMQ
-- brokers (BROKERS) with a routing key, on a confirm channel, mandatory
-- (src/channels/rabbitmq/). Its endpoint names the broker, the exchange and
-- the routing key, rabbitmq://<broker>/<exchange>/<routing key>: the broker's
-- address and credentials are the operator's configuration. Topic-based
-- subscriptions only, as websocket and nats-jetstream.
ALTER TABLE webhook.subscriptions
  DROP CONSTRAINT subscriptions_channel_type_known,
  ADD CONSTRAINT subscriptions_channel_type_known CHECK (channel_type IN ('rest-hook', 'websocket', 'nats-jetstream', 'rabbitmq')),
  DROP CONSTRAINT subscriptions_endpoint_check,
  ADD CONSTRAINT subscriptions_endpoint_check CHECK (endpoint ~ CASE channel_type
    WHEN 'websocket' THEN '^wss?://'
    WHEN 'nats-jetstream' THEN '^nats-jetstream://'
    WHEN 'rabbitmq' THEN '^rabbitmq://'
    ELSE '^https?://' END);
COMMENT ON COLUMN webhook.subscriptions.channel_type IS
  'rest-hook: notifications are POSTed to endpoint; websocket (topic-based only): they go to the clients bound to it, and endpoint is the websocket URL they connect to; nats-jetstream and rabbitmq (topic-based only): they are published to the broker and destination endpoint names (nats-jetstream://<broker>/<subject>, rabbitmq://<broker>/<exchange>/<routing key>).';

-- Down Migration

DELETE FROM webhook.subscriptions WHERE channel_type = 'rabbitmq';
ALTER TABLE webhook.subscriptions
  DROP CONSTRAINT subscriptions_endpoint_check,
  ADD CONSTRAINT subscriptions_endpoint_check CHECK (endpoint ~ CASE channel_type
    WHEN 'websocket' THEN '^wss?://'
    WHEN 'nats-jetstream' THEN '^nats-jetstream://'
    ELSE '^https?://' END),
  DROP CONSTRAINT subscriptions_channel_type_known,
  ADD CONSTRAINT subscriptions_channel_type_known CHECK (channel_type IN ('rest-hook', 'websocket', 'nats-jetstream'));
