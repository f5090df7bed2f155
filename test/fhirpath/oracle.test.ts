import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileFhirPathCriteria } from '../../src/fhirpath/compile.ts';
import { createTestDatabase, type TestDatabase } from '../support/database.ts';
import { compiledDecisions, fhirpathFires } from '../support/fhirpath-oracle.ts';

// The compiled SQL decides as fhirpath.js (HL7's JavaScript FHIRPath engine, with its R4 model) does, on
// generated pairs of versions (test/support/fhirpath-oracle.ts).

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database.drop());

const seed = Number(process.env.FHIRPATH_PROPERTY_SEED ?? '20261128');

const code = fc.constantFrom('a', 'b', 'B', 'ab', '');
const coding = fc.record({ system: fc.constantFrom('http://x', 'http://y'), code }, { requiredKeys: [] });
// Strings that case and whitespace tell apart, or do not: for ~, upper(), lower() and length().
const text = fc.constantFrom('a b', 'A B', 'a  b', 'a\tb', 'a\u00a0b', 'ß', 'SS', 'straße', 'STRASSE', 'İ', 'i\u0307', '😀', 'x', '');
const extension = fc.record({ url: fc.constantFrom('http://ext/a', 'http://ext/b'), valueString: code });

// Dates and times at every precision, with and without offsets: some the same instant written two ways, some the
// same at a lesser precision (which FHIRPath cannot order), one far from now. A fraction has three digits:
// fhirpath.js 5.1.1 reads '.5' as 5 ms, not as half a second (the compiler reads it as FHIRPath says).
const date = fc.constantFrom('2023', '2024', '2024-03', '2024-03-05', '2024-03-06', '2023-12-31', '2025-01');
const dateTime = fc.constantFrom(
  '2024',
  '2024-03',
  '2024-03-05',
  '2024-03-05T10:30:00Z',
  '2024-03-05T11:30:00+01:00',
  '2024-03-05T10:30:00.123Z',
  '2024-03-05T23:30:00-05:00',
  '2024-03-06T04:30:00Z',
  '2024-03-05T10:30:59Z',
  '2024-02-29T23:30:00-01:00',
  '2023-11-20T08:00:00+02:00',
  '2099-01-01T00:00:00Z',
);
const time = fc.constantFrom('10:30:00', '10:30:00.250', '09:00:00', '23:59:59');

const encounter = fc.record(
  {
    resourceType: fc.constant('Encounter'),
    id: fc.constantFrom('e1', 'e2'),
    status: fc.constantFrom('planned', 'in-progress', 'finished', 'cancelled'),
    class: coding,
    type: fc.array(fc.record({ coding: fc.array(coding, { maxLength: 2 }), text: code }, { requiredKeys: [] }), { maxLength: 2 }),
    priority: fc.record({ coding: fc.array(coding, { maxLength: 2 }), text }, { requiredKeys: ['coding'] }),
    extension: fc.array(extension, { maxLength: 3 }),
    length: fc.record({ value: fc.constantFrom(1, 2.5, 10), unit: fc.constant('min') }),
    period: fc.record({ start: dateTime, end: dateTime }, { requiredKeys: [] }),
    statusHistory: fc.array(fc.record({ status: fc.constant('planned'), period: fc.record({ start: dateTime }) }), { maxLength: 2 }),
  },
  { requiredKeys: ['resourceType', 'id', 'status'] },
);

const value = fc.oneof(
  fc.record({ valueString: code }),
  fc.record({ valueBoolean: fc.boolean() }),
  fc.record({ valueInteger: fc.integer({ min: -3, max: 3 }) }),
  fc.record({ valueTime: time }),
  fc.record({ valueDateTime: dateTime }),
  fc.constant({}),
);

const observation = fc
  .tuple(
    fc.record(
      {
        resourceType: fc.constant('Observation'),
        id: fc.constant('o1'),
        status: fc.constantFrom('registered', 'preliminary', 'final', 'amended'),
        code: fc.record({ coding: fc.array(coding, { maxLength: 3 }) }),
        component: fc.array(fc.record({ code: fc.record({ coding: fc.array(coding, { maxLength: 2 }) }), valueInteger: fc.integer({ min: 0, max: 3 }) }), {
          maxLength: 3,
        }),
      },
      { requiredKeys: ['resourceType', 'id', 'status', 'code'] },
    ),
    value,
  )
  // One value[x] at most, as FHIR allows.
  .map(([resource, valueOfIt]) => ({ ...resource, ...valueOfIt }));

const patient = fc
  .tuple(
    fc.record({ resourceType: fc.constant('Patient'), id: fc.constant('p1'), birthDate: date }, { requiredKeys: ['resourceType', 'id'] }),
    fc.oneof(fc.record({ deceasedBoolean: fc.boolean() }), fc.record({ deceasedDateTime: dateTime }), fc.constant({})),
  )
  .map(([resource, deceased]) => ({ ...resource, ...deceased }));

const pairs = (resource: fc.Arbitrary<Record<string, unknown>>) =>
  fc
    .record({ previous: fc.option(resource, { nil: null }), current: fc.option(resource, { nil: null }) })
    .filter((pair) => pair.previous !== null || pair.current !== null);

const encounterCriteria = [
  "%current.status = 'finished' and %previous.status != 'finished'",
  "%current.status = 'finished' and (%previous.empty() or %previous.status != 'finished')",
  "%previous.status = 'planned' and %current.status = 'in-progress'",
  '%current.status != %previous.status',
  "%current.status in ('finished' | 'cancelled')",
  "('finished' | 'cancelled') contains %current.status",
  "%current.type.coding.where(system = 'http://x').exists()",
  "%current.type.coding.where(system = 'http://x' and code = 'a').exists() and %previous.type.coding.where(system = 'http://x' and code = 'a').empty()",
  '%current.type.coding.code = %previous.type.coding.code',
  '%current.type.coding.count() > %previous.type.coding.count()',
  '%current.type.coding.count() >= 2',
  "%current.type.text.first() = 'a'",
  "%current.type.text.last().startsWith('a')",
  '%current.type.all(coding.exists())',
  "%current.type.exists(text = 'ab')",
  "%current.class.code.startsWith('a') xor %previous.class.code.startsWith('a')",
  "%current.class.code.endsWith('b') implies %current.status = 'finished'",
  "%current.class.code.contains('b')",
  '%current.class = %previous.class',
  '%current.priority.coding = %previous.priority.coding',
  "%current.extension('http://ext/a').exists()",
  "%current.extension('http://ext/a').value.ofType(string) = 'a'",
  "%current.extension('http://ext/a').value.ofType(string).first() != %previous.extension('http://ext/a').value.ofType(string).first()",
  '%current.length.value > 2',
  '%current.length.value = 2.5',
  "iif(%previous.exists(), %previous.status = 'planned', true) and %current.status = 'in-progress'",
  "iif(%current.type.coding.exists(), %current.type.coding.code.first() = 'a')",
  "Encounter.status = 'finished'",
  "status = 'finished' and id = 'e1'",
  "%current.type.coding.code.where($this = 'a' or $this = 'b').count() = 2",
  '(%current.type.text | %previous.type.text).count() = 1',
  "%current.type.text.startsWith('a')",
  '%current.extension.exists().not()',
  "%current.type.coding.where(code > 'a').exists()",
  "({} = %current.status).empty() and %current.status = 'finished'",
  "%current.id = 'e2' or {}",
  '%current.period.start > %previous.period.start',
  '%current.period.end != %previous.period.end',
  '%current.period.start = @2024-03-05',
  '%current.period.start >= @2024-03-05T10:30:00Z',
  '%current.period.start = @2024-03-05T10:30:00',
  '%current.period.start < @2024-03',
  '%current.period.start > @2024-03-05T05:30-05:00',
  '%current.period.start <= %current.period.end',
  '(%current.period.start = %previous.period.start).empty()',
  '%current.period.start > now()',
  '%current.period.end < today()',
  '%current.statusHistory.period.start = %previous.statusHistory.period.start',
  '%current.statusHistory.period.start != %previous.statusHistory.period.start',
  '%current.statusHistory.period.start > @2024-03-05T10:00:00Z',
  '%current.statusHistory.where(period.start >= @2024-03-05).count() = 1',
  'iif(%current.period.start.exists(), %current.period.start, %current.period.end) < @2024-03-05T12:00:00Z',
  "%current.priority.text ~ 'A B'",
  '%current.priority.text ~ %previous.priority.text',
  '%current.priority.text !~ %previous.priority.text',
  "%current.priority.text ~ 'STRASSE'",
  "%current.priority.text ~ {} and %current.status = 'finished'",
  "%current.status ~ 'FINISHED'",
  '%current.period.start ~ %previous.period.start',
  '%current.period.start !~ @2024-03-05T10:30:00Z',
  "%current.priority.text.upper() = 'SS'",
  "%current.priority.text.upper() = 'STRASSE'",
  "%current.priority.text.lower() = 'straße'",
  '%current.priority.text.lower() = %previous.priority.text.lower()',
  '%current.priority.text.length() > 2',
  '%current.priority.text.length() = 2',
  "%current.type.text.upper() = 'A'",
  '%current.type.text.length() >= 1',
  "%current.type.text.lower().startsWith('a')",
  // In a FHIRPath string, a pattern's backslash is written twice.
  "%current.priority.text.matches('^[a-z]+\\\\s[a-z]+$')",
  "%current.priority.text.matches('(?:ss|ß)')",
  "%current.priority.text.matches('^.$')",
  "%current.type.text.matches('b')",
  "%current.class.code.matches('^a|b$') != %previous.class.code.matches('^a|b$')",
];

const patientCriteria = [
  '%current.birthDate > @2024',
  '%current.birthDate = %previous.birthDate',
  '%current.birthDate != %previous.birthDate',
  '%current.birthDate < today()',
  '%current.birthDate <= @2024-03-05',
  '%current.deceased.ofType(dateTime) > %current.birthDate',
  '%current.deceased.ofType(dateTime) = @2024-03-05',
  '%current.deceased.ofType(dateTime).exists() and %previous.deceased.ofType(dateTime).empty()',
];

const observationCriteria = [
  "%current.value.ofType(string) = 'a'",
  '%current.value.ofType(boolean)',
  '%current.value.ofType(boolean) and %previous.value.ofType(boolean).not()',
  '%current.value.ofType(integer) > %previous.value.ofType(integer)',
  '%current.value.ofType(integer) <= 0',
  '%current.value.exists() and %previous.value.empty()',
  "%current.code.coding.where(system = 'http://y').code contains 'B'",
  "%current.component.where(code.coding.code = 'a').value.ofType(integer).first() = 2",
  "%current.component.where(code.coding.exists(code = 'a')).exists()",
  '%current.component.value.ofType(integer).count() != %previous.component.value.ofType(integer).count()',
  "%current.status in ('final' | 'amended') and %previous.status = 'preliminary'",
  "%current.code.coding.code = 'a'",
  '%current.value.count() = 1',
  '%current.value.ofType(time) > @T10:00',
  '(%current.value.ofType(time) = @T10:30).empty() and %current.value.exists()',
  '%current.value.ofType(time) = @T10:30:00',
  '%current.value.ofType(time) >= @T10:30:00.1',
  '%current.value.ofType(time) < %previous.value.ofType(time)',
  '%current.value.ofType(dateTime) >= @2024-03-05T10:30:00Z',
  '%current.value is string',
  '%current.value.is(boolean)',
  '%current.value is FHIR.integer and %previous.value is dateTime',
  '(%current.value as integer) > 1',
  "%current.value.as(string) = 'a'",
  '%current.component.value is integer',
  '(%current.component.value as integer) = 2',
  '(%current.value is dateTime) and (%previous.value is dateTime).not()',
  '%current.value.ofType(integer) ~ %previous.value.ofType(integer)',
  '%current.value.ofType(time) ~ @T10:30:00',
];

describe('compiled FHIRPath criteria', () => {
  for (const [resourceType, criteria, resource] of [
    ['Encounter', encounterCriteria, encounter],
    ['Observation', observationCriteria, observation],
    ['Patient', patientCriteria, patient],
  ] as const) {
    for (const expression of criteria) {
      it(`decide as fhirpath.js: ${resourceType} ${expression}`, async () => {
        const sql = compileFhirPathCriteria(expression, resourceType);
        const generated = fc.sample(pairs(resource), { numRuns: 1000, seed });
        const answers = await compiledDecisions(database.pool, sql, generated);
        const disagreements = generated
          .map((pair, index) => ({ pair, sql: answers[index], fhirpath: fhirpathFires(expression, pair) }))
          .filter((result) => result.sql !== result.fhirpath);
        expect(disagreements.slice(0, 3), `seed ${seed}`).toEqual([]);
        // Each criteria is decided both ways over the generated pairs: a test that could only ever pass is none.
        expect(new Set(answers).size, `both decisions among 1,000 pairs (seed ${seed})`).toBe(2);
      });
    }
  }
});

// Expressions generated from the grammar the compiler takes. Over Encounter: each atom a test of one element
// (a singleton, a repeating one, a choice narrowed by ofType(), a dateTime), of %current or %previous or the bare context,
// composed with the logical operators, not() and iif(). Each is decided on pairs of versions as fhirpath.js decides.
const version = fc.constantFrom('%current.', '%previous.', '');
const stringPath = fc.constantFrom('status', 'class.code', 'type.text', 'type.coding.code', 'type.coding.system', 'priority.coding.code', 'id');
const stringLiteral = fc.constantFrom("'a'", "'b'", "'ab'", "''", "'finished'", "'http://x'", "'e1'");
const numberLiteral = fc.constantFrom('0', '1', '2', '2.5', '10', '-1');
const comparison = fc.constantFrom('=', '!=', '<', '<=', '>', '>=');
const dateTimeLiteral = fc.constantFrom('@2024', '@2024-03-05', '@2024-03-05T10:30:00Z', '@2024-03-05T06:30:00-04:00', '@2024-03-05T10:30', 'today()', 'now()');

const atom: fc.Arbitrary<string> = fc.oneof(
  fc.tuple(version, stringPath, fc.constantFrom('=', '!='), stringLiteral).map(([v, p, o, l]) => `${v}${p} ${o} ${l}`),
  fc.tuple(version, stringPath, fc.constantFrom('exists()', 'empty()', 'count() > 1', 'count() = 1')).map(([v, p, f]) => `${v}${p}.${f}`),
  fc.tuple(version, stringPath, fc.constantFrom('startsWith', 'endsWith', 'contains'), stringLiteral).map(([v, p, f, l]) => `${v}${p}.${f}(${l})`),
  fc.tuple(version, stringPath, stringLiteral, stringLiteral).map(([v, p, a, b]) => `${v}${p} in (${a} | ${b})`),
  fc.tuple(version, stringPath, stringLiteral).map(([v, p, l]) => `(${l} | 'x') contains ${v}${p}.first()`),
  fc.tuple(stringPath, fc.constantFrom('=', '!=')).map(([p, o]) => `%current.${p} ${o} %previous.${p}`),
  fc.tuple(version, comparison, numberLiteral).map(([v, o, n]) => `${v}length.value ${o} ${n}`),
  fc.tuple(version, comparison, stringLiteral).map(([v, o, l]) => `${v}class.code ${o} ${l}`),
  fc.tuple(version, comparison, numberLiteral).map(([v, o, n]) => `${v}type.coding.count() ${o} ${n}`),
  fc.tuple(version, fc.constantFrom('system', 'code'), stringLiteral).map(([v, e, l]) => `${v}type.coding.where(${e} = ${l}).exists()`),
  fc.tuple(version, stringLiteral).map(([v, l]) => `${v}type.all(text != ${l})`),
  fc.tuple(version, stringLiteral).map(([v, l]) => `${v}extension('http://ext/a').value.ofType(string) = ${l}`),
  fc.tuple(version, stringLiteral).map(([v, l]) => `${v}type.coding.code.where($this > ${l}).count() = 1`),
  fc.tuple(version, fc.constantFrom('start', 'end'), comparison, dateTimeLiteral).map(([v, e, o, l]) => `${v}period.${e} ${o} ${l}`),
  fc.tuple(fc.constantFrom('start', 'end'), comparison).map(([e, o]) => `%current.period.${e} ${o} %previous.period.${e}`),
  fc.constantFrom('true', 'false', '{}'),
);

// Over Observation: its value[x] and its components' narrowed with ofType(), tested with is and read with as,
// compared as strings (=, ~, matches(), upper(), length()), integers, dateTimes and times.
const observationAtom: fc.Arbitrary<string> = fc.oneof(
  fc.tuple(version, fc.constantFrom('string', 'boolean', 'integer', 'time', 'dateTime')).map(([v, t]) => `${v}value is ${t}`),
  fc.tuple(version, fc.constantFrom('=', '!=', '~', '!~'), stringLiteral).map(([v, o, l]) => `${v}value.ofType(string) ${o} ${l}`),
  fc
    .tuple(version, fc.constantFrom("matches('^a')", "matches('b$')", "upper() = 'B'", 'length() = 2', "lower() = 'b'"))
    .map(([v, f]) => `${v}value.ofType(string).${f}`),
  fc.tuple(version, comparison, fc.constantFrom('-1', '0', '2')).map(([v, o, n]) => `(${v}value as integer) ${o} ${n}`),
  fc.tuple(version, comparison, dateTimeLiteral).map(([v, o, l]) => `${v}value.ofType(dateTime) ${o} ${l}`),
  fc.tuple(version, comparison, fc.constantFrom('@T10:30:00', '@T10', '@T23:59:59.000')).map(([v, o, l]) => `${v}value.ofType(time) ${o} ${l}`),
  fc.constantFrom('=', '!=', '~', '<').map((o) => `%current.value.ofType(integer) ${o} %previous.value.ofType(integer)`),
  fc.tuple(version, comparison, fc.constantFrom('0', '1', '3')).map(([v, o, n]) => `${v}component.value.ofType(integer).first() ${o} ${n}`),
  fc.tuple(version, fc.constantFrom('a', 'b')).map(([v, c]) => `${v}component.where(code.coding.code = '${c}').value is integer`),
  fc.tuple(version, fc.constantFrom('registered', 'final')).map(([v, st]) => `${v}status = '${st}'`),
  fc.constantFrom('true', 'false', '{}'),
);

/** Criteria composed of atoms with the logical operators, not() and iif(), three deep at most. */
function composed(atoms: fc.Arbitrary<string>): fc.Arbitrary<string> {
  return fc.letrec<{ criteria: string }>((tie) => ({
    criteria: fc.oneof(
      { maxDepth: 3, depthIdentifier: 'criteria' },
      atoms,
      fc.tuple(tie('criteria'), fc.constantFrom('and', 'or', 'xor', 'implies'), tie('criteria')).map(([a, o, b]) => `(${a}) ${o} (${b})`),
      tie('criteria').map((a) => `(${a}).not()`),
      fc.tuple(tie('criteria'), tie('criteria'), tie('criteria')).map(([c, a, b]) => `iif(${c}, ${a}, ${b})`),
    ),
  })).criteria;
}

describe('generated FHIRPath criteria', () => {
  it.each([
    ['Encounter', atom, encounter],
    ['Observation', observationAtom, observation],
  ] as const)('over %s, each decide as fhirpath.js on generated version pairs', { timeout: 120_000 }, async (resourceType, atoms, resource) => {
    const expressions = fc.sample(composed(atoms), { numRuns: 150, seed });
    const versions = fc.sample(pairs(resource), { numRuns: 200, seed: seed + 1 });
    let decidedBothWays = 0;
    for (const expression of expressions) {
      const answers = await compiledDecisions(database.pool, compileFhirPathCriteria(expression, resourceType), versions);
      const disagreements = versions
        .map((pair, index) => ({ pair, sql: answers[index], fhirpath: fhirpathFires(expression, pair) }))
        .filter((result) => result.sql !== result.fhirpath);
      expect(disagreements.slice(0, 2), `${expression} (seed ${seed})`).toEqual([]);
      if (new Set(answers).size === 2) decidedBothWays++;
    }
    // Most generated criteria fire on some pairs and not on others: the comparison says something.
    expect(decidedBothWays, `criteria decided both ways among 150 (seed ${seed})`).toBeGreaterThan(75);
  });
});
