import { describe, expect, it } from 'vitest';
import { compileFhirPathCriteria } from '../../src/fhirpath/compile.ts';
import { FhirPathRefused } from '../../src/fhirpath/parse.ts';

// What the compiler cannot translate exactly it refuses, naming the construct and where it is: never an
// approximation that would fire where FHIRPath does not, or stay silent where it fires.

function refusal(expression: string, resourceType = 'Encounter'): FhirPathRefused {
  try {
    compileFhirPathCriteria(expression, resourceType);
  } catch (error) {
    if (error instanceof FhirPathRefused) return error;
    throw error;
  }
  throw new Error(`compiled: ${expression}`);
}

describe('a FHIRPath criteria the compiler does not take', () => {
  it.each([
    ['%current.subject.resolve().exists()', 'resolve()', 1, 18],
    ["%current.class.memberOf('http://vs').exists()", 'memberOf()', 1, 16],
    ['%current.descendants().exists()', 'descendants()', 1, 10],
    ["%current.conformsTo('http://profile')", 'conformsTo()', 1, 10],
    ["%current.statsu = 'finished'", '.statsu', 1, 10],
    ["%current.status = 'finished' and %current.bogus()", 'bogus()', 1, 43],
    ['%current.status', 'the expression', 1, 10],
    ['%current.status.not()', 'not()', 1, 17],
    ['%current.status = 1', 'String', 1, 17],
    ["%resource.status = 'finished'", '%resource', 1, 1],
    ['%current.period.start > @2020-02-30', 'the date @2020-02-30', 1, 25],
    ["%current.period.start > '2020'", 'DateTime', 1, 23],
    ['%current.period.start in %previous.period.end', 'the operator in', 1, 23],
    ['%current.period.start.now() > @2020', 'now()', 1, 23],
    ["%current.length = 5 'min'", "the quantity 5 'min'", 1, 19],
    ["%current.type.text ~ 'A'", 'the operator ~', 1, 20],
    ['%current.length.value ~ 2', 'the operator ~', 1, 23],
    ['%current.period.start ~ @2024-03-05', 'the operator ~', 1, 23],
    ['%current is Encounter', 'the operator is', 1, 10],
    ["%current.status.matches('fin', 'i')", 'matches()', 1, 17],
    ['%current.status.matches(%current.id)', 'matches()', 1, 17],
    ["%current.status.matches('(fin)\\\\1')", "matches('(fin)\\1')", 1, 25],
    ['%current.status.as(string).exists()', 'as()', 1, 17],
    ["%current.type[0].text = 'a'", 'an indexer [ ]', 1, 14],
    ['%current.length.value + 1 > 2', 'the operator +', 1, 23],
    ["Bundle.entry.resource.where(resourceType='DocumentReference').status contains 'current'", 'Bundle', 1, 1],
    ["%current.status = 'finished' and", 'the expression', null, null],
  ])('%s: refused, naming %s', (expression, construct, line, column) => {
    const refused = refusal(expression);
    expect(refused.construct).toBe(construct);
    expect(refused.at === null ? null : refused.at.line).toBe(line);
    if (column !== null) expect(refused.at?.column).toBe(column);
    expect(refused.message).toContain(construct);
  });

  it('names the types it knows of a choice element that is never the one asked for', () => {
    const refused = refusal('%current.value.ofType(Attachment).exists()', 'Observation');
    expect(refused.message).toContain('Observation.value[x] is never a Attachment: its types are Quantity, CodeableConcept, string');
  });

  it('asks for ofType() before a choice element is compared or read into', () => {
    expect(refusal("%current.value = 'a'", 'Observation').reason).toBe('a choice element is compared only once narrowed with ofType()');
    expect(refusal('%current.value.code.exists()', 'Observation').reason).toContain('narrow it with ofType() first');
  });
});
