-- FHIRPath `|`: the items of both collections without duplicates (equal as
-- fhirpath.equal compares them), each where it first appears, the left
-- operand's first.
CREATE OR REPLACE FUNCTION fhirpath.union(left_operand jsonb, right_operand jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (
    SELECT coalesce(jsonb_agg(item ORDER BY first_place), '[]')
    FROM (SELECT item, min(place) AS first_place
          FROM jsonb_array_elements(left_operand || right_operand) WITH ORDINALITY AS items(item, place)
          GROUP BY item) distinct_items
  );
