-- A string as FHIRPath's `~` compares it: upper-cased and each whitespace
-- character (Unicode's White_Space, 25 of them) a space, as fhirpath.js does
-- (toUpperCase, then \p{White_Space} to ' '); runs are not collapsed, so
-- 'a b' ~ 'a  b' is false. Upper-cased by ICU's root locale, whatever the
-- database's collation, as JavaScript's toUpperCase: 'ß' is 'SS'.
CREATE OR REPLACE FUNCTION fhirpath.equivalence_text(value text) RETURNS text
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN upper(translate(value,
                         E'\u0009\u000a\u000b\u000c\u000d\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000',
                         repeat(' ', 24)) COLLATE "und-x-icu");
