-- Every subscription has its row of webhook.subscription_streams from the
-- start: its event numbering begins at 1, and a claim can lock it.

CREATE OR REPLACE FUNCTION webhook.create_subscription_stream() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  INSERT INTO webhook.subscription_streams (subscription_id) VALUES (NEW.id);
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER subscriptions_create_stream
  AFTER INSERT ON webhook.subscriptions
  FOR EACH ROW EXECUTE FUNCTION webhook.create_subscription_stream();
