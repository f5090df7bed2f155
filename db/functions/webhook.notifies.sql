-- Whether a written (or deleted) resource notifies a subscription with this predicate.
-- Silent: a predicate that errs on some odd content does not match it, and
-- never makes the write itself fail.
CREATE OR REPLACE FUNCTION webhook.notifies(resource_type text, content jsonb, predicate jsonpath) RETURNS boolean
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN (resource_type <> 'Bundle' OR content ->> 'type' = 'document')
     AND (predicate IS NULL OR coalesce(jsonb_path_match(content, predicate, '{}', true), false));
