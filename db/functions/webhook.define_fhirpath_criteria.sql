-- The topics' FHIRPath criteria, compiled to SQL by src/fhirpath/ and stored
-- in subscription_topics.compiled, gathered into one function the
-- notification trigger calls (webhook.record_topic_events):
--
--   webhook.fhirpath_criteria_hold(criteria, previous, current)
--
-- whether the criteria named `criteria` (the md5 of its SQL) holds for a
-- write: one CASE branch per distinct criteria, its SQL as compiled, which a
-- DBA reads with \sf. A criteria differs from topic to topic, so it cannot
-- be written in the trigger's statement; as a plain SQL function of its
-- arguments this one is inlined into it, and each write is decided in the
-- same statement that records its events, its previous version read once.
--
-- This function writes it again from the stored topics: when topics are
-- added (the trigger below, in the adding transaction), and when this file
-- is applied (the last statement below), so that a new release's
-- definition never drops the topics' criteria. The compiled text comes only
-- from the service's compiler, never from a client. Two transactions adding
-- topics take turns (an advisory lock), so the second writes the function
-- with the first's criteria too, and neither fails on the other's update of
-- it.

CREATE OR REPLACE FUNCTION webhook.define_fhirpath_criteria() RETURNS void
  LANGUAGE plpgsql
  AS $$
DECLARE
  branches text;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('webhook.define_fhirpath_criteria'));
  SELECT string_agg(format(E'\n    WHEN %L THEN %s', md5(criteria.sql), criteria.sql), '' ORDER BY md5(criteria.sql))
  INTO branches
  FROM (SELECT DISTINCT trigger #>> '{fhirPath,sql}' AS sql
        FROM webhook.subscription_topics topic
        CROSS JOIN LATERAL jsonb_array_elements(topic.compiled -> 'triggers') AS trigger
        WHERE jsonb_typeof(trigger -> 'fhirPath') = 'object') criteria;
  EXECUTE format(
    $definition$
CREATE OR REPLACE FUNCTION webhook.fhirpath_criteria_hold(criteria text, previous jsonb, current jsonb) RETURNS boolean
  LANGUAGE sql STABLE PARALLEL SAFE
  RETURN %s
    $definition$,
    CASE WHEN branches IS NULL THEN 'false' ELSE format(E'CASE criteria%s\n    ELSE false\n  END', branches) END);
  COMMENT ON FUNCTION webhook.fhirpath_criteria_hold(text, jsonb, jsonb) IS
    'Whether the topic FHIRPath criteria whose SQL has this md5 holds for a write (previous, current): written by webhook.define_fhirpath_criteria from webhook.subscription_topics.compiled.';
END
$$;

CREATE OR REPLACE FUNCTION webhook.define_fhirpath_criteria_of_topics() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  PERFORM webhook.define_fhirpath_criteria();
  RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER subscription_topics_define_fhirpath_criteria
  AFTER INSERT OR UPDATE OF compiled OR DELETE ON webhook.subscription_topics
  FOR EACH STATEMENT EXECUTE FUNCTION webhook.define_fhirpath_criteria_of_topics();

SELECT webhook.define_fhirpath_criteria();
