-- FHIRPath iif(criterion, if_true, otherwise): if_true when the criterion is
-- true, else `otherwise` (empty when not given). Not STRICT: only the branch
-- taken is evaluated in FHIRPath, so an error (NULL) in the other does not
-- make the result one. An error in the criterion, or more than one item in
-- it, does.
CREATE OR REPLACE FUNCTION fhirpath.iif(criterion jsonb, if_true jsonb, otherwise jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE
    WHEN criterion IS NULL OR jsonb_array_length(criterion) > 1 THEN NULL::jsonb
    WHEN criterion = '[true]' THEN if_true
    ELSE otherwise
  END;
