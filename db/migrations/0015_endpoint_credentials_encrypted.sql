-- Up Migration

-- An endpoint's credentials out of the readable columns.
--
-- A subscriber may put credentials in its endpoint: a user and password
-- (https://user:pw@host/hook) or a token in the query (?token=…). Until now
-- the endpoint was stored as given, so whoever reads webhook.subscriptions or
-- webhook.delivery_log (DBAs, backups, replicas) saw them, while the channel
-- headers, which carry the same kind of secret, are encrypted. From now on
-- such an endpoint is stored as it is shown everywhere else (user, password
-- and query values as ***), and the whole of it in endpoint_encrypted,
-- encrypted like the headers. An endpoint without credentials is stored as it
-- is, with endpoint_encrypted NULL.
--
-- The rows written before this keep their plain endpoint until the service
-- next starts, which encrypts them: encrypting needs SECRETS_ENCRYPTION_KEY,
-- which the database does not have (encryptEndpointCredentials in
-- src/subscriptions/store.ts).

ALTER TABLE webhook.subscriptions ADD COLUMN endpoint_encrypted bytea;

COMMENT ON COLUMN webhook.subscriptions.endpoint IS
  'The endpoint as shown: with its user, password and query values as *** when endpoint_encrypted holds the whole of it.';
COMMENT ON COLUMN webhook.subscriptions.endpoint_encrypted IS
  'The whole endpoint, AES-256-GCM (SECRETS_ENCRYPTION_KEY), when it carries credentials (a user, a password or a query); else NULL.';

-- Down Migration

-- Without the key, the database cannot put the credentials back into endpoint:
-- going down would leave those subscriptions unable to call their endpoints.
DO $$
BEGIN
  IF EXISTS (SELECT FROM webhook.subscriptions WHERE endpoint_encrypted IS NOT NULL) THEN
    RAISE EXCEPTION 'webhook.subscriptions.endpoint_encrypted holds endpoints with credentials, which only the service can decrypt: switch those subscriptions off and delete them, or stay on migration 0015';
  END IF;
END
$$;
ALTER TABLE webhook.subscriptions DROP COLUMN endpoint_encrypted;
