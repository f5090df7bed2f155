import { isResourceType } from '../fhir/definitions.ts';
import { badRequest, FhirError } from '../fhir/outcome.ts';
import { compileFhirPathCriteria } from '../fhirpath/compile.ts';
import { FhirPathRefused } from '../fhirpath/parse.ts';
import { compileCriteria, type StoredInclude } from '../search/criteria.ts';
import { compileFilters } from '../search/jsonpath.ts';
import { isSupported, searchParametersOf } from '../search/parameters.ts';
import { modifiersByType, parseCriteriaString, type Filter } from '../search/query.ts';
import { TopicRefused, type SubscriptionTopic } from './definition.ts';

/**
 * What the service compiles from a SubscriptionTopic, stored beside it
 * (webhook.subscription_topics.compiled): each resourceTrigger's previous and
 * current query criteria as jsonpath predicates, compiled by the same search
 * compiler as REST search and classic criteria, for the notification trigger
 * to evaluate in the writing transaction; the filters a subscription may set;
 * the includes of each notification shape.
 */

export type Interaction = 'create' | 'update' | 'delete';
export type TestResult = 'test-passes' | 'test-fails';

/**
 * A resourceTrigger. A version written by one of `interactions` triggers the
 * topic when its tests decide so: `previous` on the version before the write
 * (for a create, `resultForCreate` instead), `current` on the version written
 * (for a delete, `resultForDelete` instead). With `requireBoth` every test
 * given must pass, else one passing is enough; a trigger without tests fires
 * on every such write. A test is a jsonpath predicate (jsonb_path_match), or
 * null when the criteria has no filter (every resource of the type passes).
 * A FHIRPath criteria must be true as well, as R5 combines the two: `sql` is
 * its compiled form over `previous` and `current`.
 */
export type TopicTrigger = {
  resourceType: string;
  interactions: Interaction[];
  previous: { criteria: string; match: string | null } | null;
  current: { criteria: string; match: string | null } | null;
  resultForCreate: TestResult | null;
  resultForDelete: TestResult | null;
  requireBoth: boolean;
  fhirPath: { expression: string; sql: string } | null;
};

/** A filter a subscription may set on the topic (`Encounter?patient=…` in its filter-criteria). */
export type TopicFilter = { resourceType: string; parameter: string; comparators: string[] | null; modifiers: string[] | null };

/** What a full-resource notification adds for a focus of `resourceType` (additional-context). */
export type TopicShape = { resourceType: string; include: StoredInclude[]; revinclude: StoredInclude[] };

export type CompiledTopic = { triggers: TopicTrigger[]; filters: TopicFilter[]; shapes: TopicShape[] };

export function compileTopic(topic: SubscriptionTopic): CompiledTopic {
  const triggers = topic.resourceTrigger.map((trigger, index) => compileTrigger(trigger, `SubscriptionTopic.resourceTrigger[${index}]`));
  const focusTypes = [...new Set(triggers.map((trigger) => trigger.resourceType))];
  return {
    triggers,
    filters: (topic.canFilterBy ?? []).map((filter, index) => compileFilter(filter, `SubscriptionTopic.canFilterBy[${index}]`, focusTypes)),
    shapes: (topic.notificationShape ?? []).map((shape, index) => compileShape(shape, `SubscriptionTopic.notificationShape[${index}]`)),
  };
}

const allInteractions: Interaction[] = ['create', 'update', 'delete'];

function compileTrigger(trigger: SubscriptionTopic['resourceTrigger'][number], element: string): TopicTrigger {
  const resourceType = resourceTypeOf(trigger.resource, `${element}.resource`);
  const interactions = [...new Set(trigger.supportedInteraction ?? allInteractions)];
  const query = trigger.queryCriteria ?? {};
  const test = (criteria: string | undefined, name: 'previous' | 'current') =>
    criteria === undefined ? null : { criteria, match: compileTest(resourceType, criteria, `${element}.queryCriteria.${name}`) };
  const previous = test(query.previous, 'previous');
  const current = test(query.current, 'current');
  // What a create does to the previous test (there is no previous version), and a delete to the current one, is the topic's to say, not ours to guess.
  if (previous !== null && interactions.includes('create') && query.resultForCreate === undefined) {
    throw new TopicRefused(`${element}.queryCriteria.resultForCreate`, 'required with previous criteria on a trigger for create: test-passes or test-fails');
  }
  if (current !== null && interactions.includes('delete') && query.resultForDelete === undefined) {
    throw new TopicRefused(`${element}.queryCriteria.resultForDelete`, 'required with current criteria on a trigger for delete: test-passes or test-fails');
  }
  return {
    resourceType,
    interactions,
    previous,
    current,
    resultForCreate: query.resultForCreate ?? null,
    resultForDelete: query.resultForDelete ?? null,
    requireBoth: query.requireBoth ?? false,
    fhirPath: trigger.fhirPathCriteria === undefined ? null : compileFhirPath(trigger.fhirPathCriteria, resourceType, `${element}.fhirPathCriteria`),
  };
}

function compileFhirPath(expression: string, resourceType: string, element: string): { expression: string; sql: string } {
  return { expression, sql: refusingAs(element, () => compileFhirPathCriteria(expression, resourceType)) };
}

/** A query criteria (`status:not=finished`) compiled for one resource, as a classic criteria's filters are. */
function compileTest(resourceType: string, criteria: string, element: string): string | null {
  const compiled = refusingAs(element, () => compileCriteria(`${resourceType}?${criteria.replace(/^\?/, '')}`));
  if (compiled.relatedMatch !== null) throw new TopicRefused(element, 'chained parameters and _has are not supported in topic query criteria');
  if (compiled.include.length > 0 || compiled.revinclude.length > 0)
    throw new TopicRefused(element, 'a query criteria filters; _include and _revinclude belong in notificationShape');
  return compiled.match;
}

function compileFilter(filter: NonNullable<SubscriptionTopic['canFilterBy']>[number], element: string, focusTypes: string[]): TopicFilter {
  if (filter.resource === undefined && focusTypes.length > 1) {
    throw new TopicRefused(`${element}.resource`, `required when the topic has triggers on several resources (${focusTypes.join(', ')})`);
  }
  const resourceType = filter.resource === undefined ? focusTypes[0]! : resourceTypeOf(filter.resource, `${element}.resource`);
  const parameter = searchParametersOf(resourceType).get(filter.filterParameter);
  if (parameter === undefined) throw new TopicRefused(`${element}.filterParameter`, `${resourceType} has no search parameter '${filter.filterParameter}'`);
  if (!isSupported(parameter))
    throw new TopicRefused(`${element}.filterParameter`, `search parameter ${filter.filterParameter} is not supported: ${parameter.unsupported}`);
  const modifiers = filter.modifier ?? null;
  for (const modifier of modifiers ?? []) {
    if (!modifiersByType[parameter.type].includes(modifier)) {
      throw new TopicRefused(
        `${element}.modifier`,
        `'${modifier}' is not a modifier this service supports on ${resourceType}.${filter.filterParameter} (a ${parameter.type} parameter)`,
      );
    }
  }
  const comparators = filter.comparator ?? null;
  const ordered = parameter.type === 'date' || parameter.type === 'number' || parameter.type === 'quantity';
  if (!ordered && comparators?.some((comparator) => comparator !== 'eq')) {
    throw new TopicRefused(
      `${element}.comparator`,
      `comparators other than eq apply to date, number and quantity parameters; ${filter.filterParameter} is a ${parameter.type} parameter`,
    );
  }
  return { resourceType, parameter: filter.filterParameter, comparators, modifiers };
}

function compileShape(shape: NonNullable<SubscriptionTopic['notificationShape']>[number], element: string): TopicShape {
  const resourceType = resourceTypeOf(shape.resource, `${element}.resource`);
  const includes = (values: string[] | undefined, parameter: '_include' | '_revinclude', name: string) =>
    (values ?? []).flatMap((value, index) => {
      const compiled = refusingAs(`${element}.${name}[${index}]`, () => compileCriteria(`${resourceType}?${parameter}=${encodeURIComponent(value)}`));
      return parameter === '_include' ? compiled.include : compiled.revinclude;
    });
  return { resourceType, include: includes(shape.include, '_include', 'include'), revinclude: includes(shape.revInclude, '_revinclude', 'revInclude') };
}

const structureDefinitionBase = 'http://hl7.org/fhir/StructureDefinition/';

/** `Encounter` or `http://hl7.org/fhir/StructureDefinition/Encounter` → Encounter. */
function resourceTypeOf(resource: string, element: string): string {
  const type = resource.startsWith(structureDefinitionBase) ? resource.slice(structureDefinitionBase.length) : resource;
  if (!isResourceType(type))
    throw new TopicRefused(element, `'${resource}' is not an R4 resource type (or its StructureDefinition URL); profiles are not supported`);
  return type;
}

/** Runs a compilation, its FhirError (search criteria) or FhirPathRefused (FHIRPath criteria) refused as the element's. */
function refusingAs<T>(element: string, compile: () => T): T {
  try {
    return compile();
  } catch (error) {
    if (error instanceof FhirError || error instanceof FhirPathRefused) throw new TopicRefused(element, error.message);
    throw error;
  }
}

/** A subscription's filters compiled per focus type: a jsonpath predicate each (webhook.subscriptions.topic_filter). */
export type CompiledFilters = Record<string, string>;

/**
 * A topic-based subscription's filter-criteria (`Encounter?patient=Patient/123`,
 * each a search on one of the topic's focus types), checked against the
 * topic's canFilterBy and compiled by the search compiler: the filters of one
 * type AND together. A filter the topic does not offer (a parameter, a
 * modifier or a comparator it does not list), a chain, _has or a result
 * parameter is refused (FhirError), naming it. Without a listed modifier or
 * comparator, only the plain parameter and `eq` are allowed.
 */
export function compileFilterCriteria(topic: CompiledTopic, filterCriteria: string[]): CompiledFilters {
  const byType = new Map<string, Filter[]>();
  for (const criteria of filterCriteria) {
    const query = parseCriteriaString(criteria);
    const focusTypes = [...new Set(topic.triggers.map((trigger) => trigger.resourceType))];
    if (!focusTypes.includes(query.resourceType)) {
      throw badRequest(`filter ${criteria}: the topic is about ${focusTypes.join(', ')}, not ${query.resourceType}`);
    }
    const beyond = [
      query.related.length > 0 && 'chains and _has',
      (query.include.length > 0 || query.revinclude.length > 0) && '_include and _revinclude',
    ].find(Boolean);
    if (beyond) throw badRequest(`filter ${criteria}: ${beyond} are not filters a topic offers`);
    if (query.filters.length === 0) throw badRequest(`filter ${criteria} has no filter parameter`);
    for (const filter of query.filters) checkOffered(topic, query.resourceType, filter, criteria);
    byType.set(query.resourceType, [...(byType.get(query.resourceType) ?? []), ...query.filters]);
  }
  return Object.fromEntries([...byType].map(([resourceType, filters]) => [resourceType, compileFilters(filters)!]));
}

function checkOffered(topic: CompiledTopic, resourceType: string, filter: Filter, criteria: string): void {
  const code = filter.parameter.code;
  const offered = topic.filters.find((candidate) => candidate.resourceType === resourceType && candidate.parameter === code);
  if (offered === undefined) {
    const offers = topic.filters.filter((candidate) => candidate.resourceType === resourceType).map((candidate) => candidate.parameter);
    throw badRequest(
      `filter ${criteria}: the topic does not offer filtering ${resourceType} by '${code}' (its canFilterBy: ${offers.length === 0 ? 'none' : offers.join(', ')})`,
    );
  }
  const modifier = filter.modifier === undefined ? undefined : typeof filter.modifier === 'string' ? filter.modifier : filter.modifier.type;
  if (modifier !== undefined && !(offered.modifiers ?? []).includes(modifier)) {
    throw badRequest(`filter ${criteria}: the topic does not offer the modifier :${modifier} on '${code}'`);
  }
  for (const value of filter.values) {
    const prefix = 'prefix' in value ? value.prefix : 'eq';
    if (prefix !== 'eq' && !(offered.comparators ?? []).includes(prefix)) {
      throw badRequest(`filter ${criteria}: the topic does not offer the comparator ${prefix} on '${code}'`);
    }
  }
}
