import { badRequest } from '../fhir/outcome.ts';
import { compileFilters, compileRelated, type RelatedCondition } from './jsonpath.ts';
import { matchTerms, type MatchTerm } from './match-terms.ts';
import { isSupported, searchParametersOf } from './parameters.ts';
import { parseCriteriaString, type Filter, type Include } from './query.ts';

/** An _include or _revinclude of a criteria, as stored: parameter by code, resolved again on use. */
export type StoredInclude = { sourceType: string; parameter: string; targetType?: string; iterate: boolean };

/**
 * A subscription's criteria compiled once, at creation, into a value that can
 * be stored as JSON and evaluated in SQL: `match` for creations and updates,
 * `matchDeleted` for deletions (the spec evaluates only active, status and
 * :missing there and ignores the rest), each a jsonpath predicate for
 * jsonb_path_match(content, …), or null for "every resource of the type".
 * Every supported parameter compiles to SQL, so nothing is left for a worker.
 */
export type CompiledCriteria = {
  resourceType: string;
  match: string | null;
  matchDeleted: string | null;
  /** Conditions on related resources (chains, _has), for fhir.related_resources_match; null when none. */
  relatedMatch: RelatedCondition[] | null;
  /** Terms a matching resource holds at least one of (src/search/match-terms.ts); null: evaluated on every row. */
  matchTerms: MatchTerm[] | null;
  include: StoredInclude[];
  revinclude: StoredInclude[];
};

const parametersKeptForDeletions = new Set(['active', 'status']);

export function compileCriteria(criteria: string): CompiledCriteria {
  const query = parseCriteriaString(criteria);
  const resultParameter = (['count', 'sort', 'total', 'pageToken', 'summary', 'elements'] as const).find((name) => query[name] !== undefined);
  if (resultParameter !== undefined) {
    throw badRequest(`_${resultParameter === 'pageToken' ? 'page_token' : resultParameter} has no meaning in subscription criteria`);
  }
  // R4's "approximately" for a date is relative to now: criteria are compiled once and evaluated for years.
  if (query.filters.some((filter) => filter.values.some((value) => value.kind === 'date' && value.prefix === 'ap'))) {
    throw badRequest('ap on a date depends on when it is evaluated and has no fixed meaning in subscription criteria: use ge and le');
  }
  const keptForDeletions = (filter: Filter) => parametersKeptForDeletions.has(filter.parameter.code) || filter.modifier === 'missing';
  return {
    resourceType: query.resourceType,
    match: compileFilters(query.filters),
    matchDeleted: compileFilters(query.filters.filter(keptForDeletions)),
    relatedMatch: query.related.length === 0 ? null : compileRelated(query.related),
    matchTerms: matchTerms(query.filters),
    include: query.include.map(storeInclude),
    revinclude: query.revinclude.map(storeInclude),
  };
}

/** The stored includes of a criteria, resolved to their parameters again. */
export function resolveIncludes(compiled: Pick<CompiledCriteria, 'include' | 'revinclude'>): { include: Include[]; revinclude: Include[] } {
  return { include: compiled.include.map(resolveInclude), revinclude: compiled.revinclude.map(resolveInclude) };
}

function resolveInclude({ sourceType, parameter, targetType, iterate }: StoredInclude): Include {
  const definition = searchParametersOf(sourceType).get(parameter);
  if (!definition || !isSupported(definition) || definition.type === 'composite')
    throw new Error(`stored include ${sourceType}:${parameter} no longer resolves`);
  return { sourceType, parameter: definition, iterate, ...(targetType === undefined ? {} : { targetType }) };
}

function storeInclude({ sourceType, parameter, targetType, iterate }: Include): StoredInclude {
  return { sourceType, parameter: parameter.code, iterate, ...(targetType === undefined ? {} : { targetType }) };
}
