import { elementTypes, isResourceType } from '../fhir/definitions.ts';
import { badRequest, FhirError } from '../fhir/outcome.ts';
import { stringProblem } from '../fhir/storable-text.ts';
import { isSupported, searchParametersOf, type Modifier, type SearchParameter, type SimpleParameter } from './parameters.ts';
import { parseComposite, parseValue, splitUnescaped, type SearchValue } from './values.ts';

/**
 * Parsing of FHIR search queries (`Type?name[:modifier]=value&...`): repeated
 * parameters AND, comma-separated values OR, `\,` `\|` `\$` `\\` escapes.
 * Unknown parameters, modifiers and malformed values are refused, naming them.
 */

export type Filter = {
  parameter: SearchParameter;
  modifier?: Modifier;
  /** OR-ed values (one when the modifier is :missing). */
  values: SearchValue[];
};

/**
 * A condition on related resources, evaluated against their current versions:
 * `chain` (`subject:Patient.name=smith`): a reference at `reference` leads to
 * a resource of one of the targets' types that matches that target's filter;
 * `has` (`_has:Observation:patient:code=x`): a resource of `sourceType`
 * refers to this one through `reference` and matches `filter`.
 */
export type RelatedFilter =
  | { kind: 'chain'; reference: SimpleParameter; targets: { type: string; filter: Filter }[] }
  | { kind: 'has'; sourceType: string; reference: SimpleParameter; filter: Filter };

export type Include = {
  sourceType: string;
  parameter: SimpleParameter;
  targetType?: string;
  iterate: boolean;
};

export type SortOrder = { by: '_lastUpdated' | '_id'; descending: boolean };

export type SearchQuery = {
  resourceType: string;
  /**
   * Parameters left out under `Prefer: handling=lenient`: the name as given
   * (modifier and chain included), its position among the query's
   * name=value pairs (splitQuery's), and why.
   */
  ignored: { parameter: string; position: number; reason: string }[];
  filters: Filter[];
  /** Chained parameters and _has, ANDed with the filters. */
  related: RelatedFilter[];
  include: Include[];
  revinclude: Include[];
  count?: number;
  sort?: SortOrder;
  total?: 'none' | 'estimate' | 'accurate';
  pageToken?: string;
  /** `_summary=count`: the total only, no resources. */
  summary?: 'count';
  /** `_elements`: the top-level elements kept in each match (with id and meta). */
  elements?: string[];
};

export const maxCount = 1000;
/**
 * The longest alternative of a parameter's value (one of its comma-separated
 * values): a string alternative compiles to a regular expression about 40
 * times its length, which PostgreSQL runs on every candidate row. The bound is
 * per alternative, not on the list: `_id=` with 30 UUIDs (a known set of
 * resources fetched in one call) is over 1,024 characters in all.
 */
export const maxAlternativeLength = 1024;
/** The most alternatives one parameter ORs: each is a condition PostgreSQL tests on every candidate row. */
export const maxAlternatives = 100;
/**
 * The longest query a search takes (the URL's and, for POST _search, the
 * form body's parameters together, percent-encoded, its _page_token aside,
 * which the next link adds) and the longest query of a subscription's
 * criteria: what bounds the cost of all the alternatives and repeated
 * parameters together, since each alternative is bounded only by itself.
 */
export const maxQueryLength = 16_384;

export const modifiersByType: Record<SearchParameter['type'], readonly string[]> = {
  token: ['missing', 'not', 'text'],
  string: ['missing', 'exact', 'contains'],
  reference: ['missing'],
  date: ['missing'],
  number: ['missing'],
  quantity: ['missing'],
  uri: ['missing', 'above', 'below'],
  composite: [],
};

/** Parameters that shape the result rather than filter it. */
const resultParameters = new Set(['_count', '_sort', '_total', '_include', '_revinclude', '_page_token', '_format', '_pretty', '_summary', '_elements']);

/** Splits `Type?query` and parses the query for that type. */
export function parseCriteriaString(criteria: string): SearchQuery {
  const questionMark = criteria.indexOf('?');
  const resourceType = questionMark === -1 ? criteria : criteria.slice(0, questionMark);
  const query = questionMark === -1 ? '' : criteria.slice(questionMark + 1);
  return parseSearchQuery(resourceType, query);
}

/**
 * Parses a raw (still percent-encoded) query string for a search on
 * `resourceType`. With `lenient` (FHIR's `Prefer: handling=lenient`), a filter
 * parameter that cannot be used is left out and listed in `ignored` instead
 * of refusing the search.
 */
export function parseSearchQuery(resourceType: string, rawQuery: string, { lenient = false } = {}): SearchQuery {
  if (!isResourceType(resourceType)) throw badRequest(`'${resourceType}' is not an R4 resource type`);
  const search: SearchQuery = { resourceType, ignored: [], filters: [], related: [], include: [], revinclude: [] };
  // Checked before anything is decoded, and not excused under lenient handling: leaving parameters out would not make it cheaper to read.
  const queryLength = withoutPageToken(rawQuery).length;
  if (queryLength > maxQueryLength) {
    throw badRequest(`The search query has ${queryLength.toLocaleString('en')} characters; the limit is ${maxQueryLength.toLocaleString('en')}`, 'too-costly');
  }
  for (const [position, [key, value]] of splitQuery(rawQuery).entries()) {
    const colon = key.indexOf(':');
    const name = colon === -1 ? key : key.slice(0, colon);
    const modifier = colon === -1 ? undefined : key.slice(colon + 1);
    if (resultParameters.has(name)) {
      applyResultParameter(search, name, modifier, value);
      continue;
    }
    try {
      if (name === '_has') search.related.push(parseHas(resourceType, key, value));
      else if (key.includes('.')) search.related.push(parseChain(resourceType, key, value));
      else search.filters.push(parseFilter(resourceType, name, modifier, value));
    } catch (error) {
      if (!lenient || !(error instanceof FhirError)) throw error;
      search.ignored.push({ parameter: key, position, reason: error.message });
    }
  }
  return search;
}

/** The query without its `_page_token` pairs: a page's next link is the query it came from with a token added, and must be taken as that query was. */
function withoutPageToken(rawQuery: string): string {
  return rawQuery.includes('_page_token')
    ? rawQuery
        .split('&')
        .filter((pair) => !/^_page_token(=|$)/.test(pair))
        .join('&')
    : rawQuery;
}

/** `a=1&b=2` → [['a', '1'], ['b', '2']], each part percent-decoded once ('+' stays a plus). */
export function splitQuery(rawQuery: string): [string, string][] {
  return rawQuery
    .split('&')
    .filter((pair) => pair !== '')
    .map((pair) => {
      const equals = pair.indexOf('=');
      const key = equals === -1 ? pair : pair.slice(0, equals);
      const value = equals === -1 ? '' : pair.slice(equals + 1);
      return [decode(key), decode(value)];
    });
}

function decode(text: string): string {
  let decoded: string;
  try {
    decoded = decodeURIComponent(text);
  } catch {
    throw badRequest(`Malformed percent-encoding in '${text}'`);
  }
  const problem = stringProblem(decoded);
  if (problem !== undefined) throw badRequest(`The search parameter or value '${text}' has ${problem}`);
  return decoded;
}

function parseFilter(resourceType: string, name: string, modifierText: string | undefined, value: string): Filter {
  const parameter = searchParametersOf(resourceType).get(name);
  if (!parameter) throw badRequest(`Unknown search parameter '${name}' for ${resourceType}`);
  if (!isSupported(parameter)) throw new FhirError(400, 'not-supported', `search parameter ${name} is not supported: ${parameter.unsupported}`);
  const modifier = parseModifier(parameter, modifierText);
  if (value === '') throw badRequest(`Search parameter '${name}' has an empty value`);
  if (modifier === 'missing') {
    if (value !== 'true' && value !== 'false') throw badRequest(`':missing' takes true or false, not '${value}'`);
    return { parameter, modifier, values: [{ kind: 'missing', missing: value === 'true' }] };
  }
  const alternatives = splitUnescaped(value, ',');
  if (alternatives.length > maxAlternatives) {
    throw badRequest(`Search parameter '${name}' has ${alternatives.length} comma-separated alternatives; the limit is ${maxAlternatives}`, 'too-costly');
  }
  alternatives.forEach((text, index) => {
    if (text.length > maxAlternativeLength) {
      const which = alternatives.length === 1 ? 'value' : `alternative ${index + 1} of ${alternatives.length}`;
      throw badRequest(
        `Search parameter '${name}': its ${which} has ${text.length.toLocaleString('en')} characters; the limit is ${maxAlternativeLength.toLocaleString('en')} for each comma-separated alternative`,
        'too-costly',
      );
    }
  });
  const values = alternatives.map((text) => (parameter.type === 'composite' ? parseComposite(parameter, text) : parseValue(parameter, modifier, text)));
  return { parameter, ...(modifier === undefined ? {} : { modifier }), values };
}

/**
 * `reference[:Type].parameter[:modifier]=value`: one level of chaining. The
 * targets are the type named, or the reference parameter's target types that
 * define the chained parameter.
 */
/** A reference parameter that may point to more types than this (Observation.focus: any) must name the type to chain through. */
const maxChainTargets = 8;

function parseChain(resourceType: string, key: string, value: string): RelatedFilter {
  const dot = key.indexOf('.');
  const [name, targetType, ...extra] = key.slice(0, dot).split(':') as [string, ...string[]];
  const chained = key.slice(dot + 1);
  if (chained.includes('.')) throw new FhirError(400, 'not-supported', `'${key}' chains more than one level; one is supported`);
  const reference = referenceParameter(resourceType, name, key);
  if (extra.length > 0) throw badRequest(`'${key}' is not a chained parameter (reference[:Type].parameter)`);
  if (targetType !== undefined) parseModifier(reference, targetType);
  const types = targetType !== undefined ? [targetType] : reference.targets;
  if (types.length === 0 || types.length > maxChainTargets) throw badRequest(`'${name}' may refer to any type: name one, as ${name}:Type.${chained}`);
  const colon = chained.indexOf(':');
  const [innerName, innerModifier] = colon === -1 ? [chained, undefined] : [chained.slice(0, colon), chained.slice(colon + 1)];
  const definedFor = types.filter((type) => {
    const parameter = searchParametersOf(type).get(innerName);
    return parameter !== undefined && isSupported(parameter);
  });
  // None defines it (or supports it): parsing for the first says which.
  if (definedFor.length === 0) parseFilter(types[0]!, innerName, innerModifier, value);
  return { kind: 'chain', reference, targets: definedFor.map((type) => ({ type, filter: parseFilter(type, innerName, innerModifier, value) })) };
}

/** `_has:SourceType:reference:parameter[:modifier]=value`: reverse chaining, one level. */
function parseHas(resourceType: string, key: string, value: string): RelatedFilter {
  const [, sourceType, referenceName, innerName, innerModifier, ...extra] = key.split(':');
  if (innerName === '_has') throw new FhirError(400, 'not-supported', `'${key}' nests _has; one level is supported`);
  if (!sourceType || !referenceName || !innerName || extra.length > 0) {
    throw badRequest(`'${key}' must be _has:Type:reference:parameter[:modifier]`);
  }
  if (!isResourceType(sourceType)) throw badRequest(`'${key}': '${sourceType}' is not an R4 resource type`);
  const reference = referenceParameter(sourceType, referenceName, key);
  if (reference.targets.length > 0 && !reference.targets.includes(resourceType)) {
    throw badRequest(`'${key}': ${sourceType}.${referenceName} cannot refer to ${resourceType}`);
  }
  return { kind: 'has', sourceType, reference, filter: parseFilter(sourceType, innerName, innerModifier, value) };
}

function referenceParameter(resourceType: string, name: string, key: string): SimpleParameter {
  const parameter = searchParametersOf(resourceType).get(name);
  if (!parameter) throw badRequest(`Unknown search parameter '${name}' for ${resourceType} in '${key}'`);
  if (!isSupported(parameter)) throw new FhirError(400, 'not-supported', `search parameter ${name} is not supported: ${parameter.unsupported}`);
  if (parameter.type !== 'reference') throw badRequest(`'${key}': '${name}' is not a reference parameter`);
  return parameter;
}

function parseModifier(parameter: SearchParameter, text: string | undefined): Modifier | undefined {
  if (text === undefined) return undefined;
  if (modifiersByType[parameter.type].includes(text)) return text as Modifier;
  if (parameter.type === 'reference' && isResourceType(text)) {
    if (parameter.targets.length > 0 && !parameter.targets.includes(text)) {
      throw badRequest(`Search parameter '${parameter.code}' cannot refer to ${text} (it refers to ${parameter.targets.join(', ')})`);
    }
    return { type: text };
  }
  throw badRequest(`Unknown modifier ':${text}' on ${parameter.type} parameter '${parameter.code}'`);
}

function applyResultParameter(search: SearchQuery, name: string, modifier: string | undefined, value: string): void {
  if (modifier !== undefined && !((name === '_include' || name === '_revinclude') && modifier === 'iterate')) {
    throw badRequest(`Unknown modifier ':${modifier}' on '${name}'`);
  }
  switch (name) {
    case '_count': {
      if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > maxCount)
        throw badRequest(`_count must be an integer from 1 to ${maxCount}, not '${value}'`);
      search.count = Number(value);
      return;
    }
    case '_sort': {
      const sort = /^(-?)(_lastUpdated|_id)$/.exec(value);
      if (!sort) throw badRequest(`_sort supports _lastUpdated, -_lastUpdated, _id and -_id, not '${value}'`);
      search.sort = { by: sort[2] as SortOrder['by'], descending: sort[1] === '-' };
      return;
    }
    case '_total': {
      if (value !== 'none' && value !== 'estimate' && value !== 'accurate') throw badRequest(`_total must be none, estimate or accurate, not '${value}'`);
      search.total = value;
      return;
    }
    case '_page_token':
      search.pageToken = value;
      return;
    case '_format':
      if (!/json/.test(value)) throw new FhirError(400, 'not-supported', `Only JSON is supported, not _format=${value}`);
      return;
    case '_summary':
      if (value === 'count') search.summary = 'count';
      else if (value !== 'false') throw new FhirError(400, 'not-supported', `_summary supports count and false, not '${value}'`);
      return;
    case '_elements':
      search.elements = parseElements(search.resourceType, value);
      return;
    case '_include':
    case '_revinclude':
      (name === '_include' ? search.include : search.revinclude).push(...parseInclude(search.resourceType, name, value, modifier === 'iterate'));
      return;
  }
}

/** `_elements=status,participant`: top-level elements of the type (a choice element by its name, `value` for valueQuantity). */
function parseElements(resourceType: string, value: string): string[] {
  const names = value.split(',').map((name) => name.trim());
  for (const name of names) {
    if (!elementTypes.has(`${resourceType}.${name}`)) throw badRequest(`_elements: ${resourceType} has no element '${name}'`);
  }
  return names;
}

/**
 * `Type:parameter[:TargetType]`, or `Type:*` for every reference parameter of
 * the type; a bare `*` in _include is the searched type's `*`.
 */
function parseInclude(searchedType: string, name: string, value: string, iterate: boolean): Include[] {
  if (value === '*') {
    if (name === '_revinclude') throw badRequest('_revinclude=* would read every resource type: name one, as _revinclude=Type:*');
    return parseInclude(searchedType, name, `${searchedType}:*`, iterate);
  }
  const [sourceType, code, targetType, ...extra] = value.split(':');
  if (!sourceType || !code || extra.length > 0) throw badRequest(`${name} must be Type:parameter, Type:parameter:TargetType or Type:*, not '${value}'`);
  if (!isResourceType(sourceType)) throw badRequest(`${name}=${value}: '${sourceType}' is not an R4 resource type`);
  if (code === '*') {
    if (targetType !== undefined) throw badRequest(`${name}=${value}: a wildcard takes no target type`);
    return [...searchParametersOf(sourceType).values()]
      .filter((parameter): parameter is SimpleParameter => isSupported(parameter) && parameter.type === 'reference')
      .filter((parameter) => name === '_include' || parameter.targets.length === 0 || parameter.targets.includes(searchedType))
      .map((parameter) => ({ sourceType, parameter, iterate }));
  }
  const parameter = searchParametersOf(sourceType).get(code);
  if (!parameter) throw badRequest(`${name}=${value}: ${sourceType} has no search parameter '${code}'`);
  if (!isSupported(parameter)) throw new FhirError(400, 'not-supported', `search parameter ${code} is not supported: ${parameter.unsupported}`);
  if (parameter.type !== 'reference') throw badRequest(`${name}=${value}: '${code}' is not a reference parameter`);
  if (targetType !== undefined && (!isResourceType(targetType) || (parameter.targets.length > 0 && !parameter.targets.includes(targetType)))) {
    throw badRequest(`${name}=${value}: '${code}' cannot refer to ${targetType}`);
  }
  return [{ sourceType, parameter, iterate, ...(targetType === undefined ? {} : { targetType }) }];
}
