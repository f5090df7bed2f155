-- Up Migration

-- A subscriber never receives a version of a resource after a newer one: a
-- notification batch skips the versions older than one the subscriber was
-- already called with (src/dispatch/tasks/notification.ts). It asks, for the
-- resources of the batch, for the newest version attempted for the
-- subscription: this index answers it without reading the subscription's
-- whole history.

CREATE INDEX delivery_attempts_by_resource
  ON webhook.delivery_attempts (subscription_id, resource_type, resource_id, version_id)
  WHERE kind = 'notification';

-- Down Migration

DROP INDEX webhook.delivery_attempts_by_resource;
