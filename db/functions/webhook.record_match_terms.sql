-- A subscription's criteria never change: its terms are written once, with it.
CREATE OR REPLACE FUNCTION webhook.record_match_terms() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO webhook.subscription_match_terms (subscription_id, resource_type, path, value)
  SELECT DISTINCT NEW.id, NEW.resource_type, term ->> 'path', term ->> 'value'
  FROM jsonb_array_elements(NEW.compiled_criteria -> 'matchTerms') AS term
  WHERE NEW.has_match_terms;
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER subscriptions_record_match_terms
  AFTER INSERT ON webhook.subscriptions
  FOR EACH ROW EXECUTE FUNCTION webhook.record_match_terms();
