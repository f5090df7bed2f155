-- Every change is a new version with a new lastUpdated, whoever makes it.
CREATE OR REPLACE FUNCTION webhook.stamp_subscription_version() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  NEW.version_id := OLD.version_id + 1;
  NEW.last_updated := clock_timestamp();
  RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER subscriptions_stamp_version
  BEFORE UPDATE ON webhook.subscriptions
  FOR EACH ROW EXECUTE FUNCTION webhook.stamp_subscription_version();
