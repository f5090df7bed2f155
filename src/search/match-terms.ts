import type { ElementPath } from './element-paths.ts';
import { accessor } from './jsonpath.ts';
import type { SimpleParameter } from './parameters.ts';
import type { Filter } from './query.ts';
import type { SearchValue } from './values.ts';

/**
 * The equality terms a criteria requires: a resource that matches it holds
 * at least one of them, a value `value` at the jsonpath `path` (a reference
 * string, a code, an identifier's value, an id, a uri). The notification
 * trigger looks up the subscriptions by the terms a written row holds
 * (webhook.subscription_match_terms, db/migrations/0010_subscription_match_terms.sql)
 * and evaluates the full criteria only for those, so the cost of a write
 * grows with the subscriptions that can match it, not with all of them.
 *
 * A term is a necessary condition, never a sufficient one: the path drops the
 * filters of the parameter's expression (where(resolve() is Patient)), the
 * value ignores a token's system. Criteria with no filter whose every match
 * has such a term have none (null) and are evaluated on every row, as before.
 */
export type MatchTerm = { path: string; value: string };

export function matchTerms(filters: readonly Filter[]): MatchTerm[] | null {
  // Of the filters (ANDed), the first that names a term for every value it accepts; references first, as the most selective.
  const candidates = filters.map(filterTerms).filter((terms): terms is MatchTerm[] => terms !== null);
  const byReference = candidates.find((terms) => terms.some((term) => term.path.endsWith('."reference"')));
  const chosen = byReference ?? candidates[0];
  return chosen === undefined ? null : dedupe(chosen);
}

/**
 * The most bytes of a term's path and value together: they share one btree
 * entry (webhook.subscription_match_terms' primary key), which holds at most
 * 2,704 bytes. A filter with a longer term (a token of 1,000 CJK characters
 * is 3,000 bytes) names none, and is evaluated on every row as one without
 * terms is: slower, never wrong.
 */
const maxTermBytes = 2_000;

function filterTerms({ parameter, modifier, values }: Filter): MatchTerm[] | null {
  if (parameter.type === 'composite' || (modifier !== undefined && typeof modifier !== 'object')) return null;
  const terms: MatchTerm[] = [];
  for (const value of values) {
    const found = valueTerms(parameter, value);
    if (found === null) return null;
    terms.push(...found);
  }
  return terms.some((term) => Buffer.byteLength(term.path) + Buffer.byteLength(term.value) > maxTermBytes) ? null : terms;
}

/** The terms one value requires, on every path of the parameter; null when one path could match without any. */
function valueTerms(parameter: SimpleParameter, value: SearchValue): MatchTerm[] | null {
  const terms: MatchTerm[] = [];
  for (const path of parameter.paths) {
    const types = path.at(-1)?.types;
    if (types === undefined || types.length !== 1) return null;
    const found = pathTerms(path, types[0]!, parameter, value);
    if (found === null) return null;
    terms.push(...found);
  }
  return terms;
}

function pathTerms(path: ElementPath, type: string, parameter: SimpleParameter, value: SearchValue): MatchTerm[] | null {
  const at = (suffix: string, values: readonly string[]) => values.map((term) => ({ path: `${plainAccessor(path)}${suffix}`, value: term }));
  switch (value.kind) {
    case 'reference': {
      const targets = value.type === undefined ? parameter.targets : [value.type];
      if (type !== 'Reference' || targets.length === 0) return null;
      return at(
        '."reference"',
        targets.map((target) => `${target}/${value.id}`),
      );
    }
    case 'token': {
      if (value.code === undefined) return null;
      if (type === 'Coding') return at('."code"', [value.code]);
      if (type === 'CodeableConcept') return at('."coding"."code"', [value.code]);
      if (type === 'Identifier' || type === 'ContactPoint') return at('."value"', [value.code]);
      // A primitive: a code, id, string, uri or boolean (true and false are stored as JSON booleans, read as text).
      return /^[a-z]/.test(type) || type.endsWith('.String') ? at('', [value.code]) : null;
    }
    case 'uri':
      return type === 'uri' || type === 'url' ? at('', [value.uri]) : null;
    default:
      return null;
  }
}

/** The path without the expression's filters and indexes: it reaches every value the filtered one does. */
function plainAccessor(path: ElementPath): string {
  return accessor(path.map(({ name }) => ({ name })));
}

function dedupe(terms: MatchTerm[]): MatchTerm[] {
  const seen = new Map(terms.map((term) => [`${term.path}\u0000${term.value}`, term]));
  return [...seen.values()];
}
