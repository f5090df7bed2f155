import fc from 'fast-check';
import fhirpath from 'fhirpath';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FhirPathRefused } from '../../src/fhirpath/parse.ts';
import { postgresRegex } from '../../src/fhirpath/regex.ts';
import { createTestDatabase, type TestDatabase } from '../support/database.ts';

// matches() patterns rewritten for PostgreSQL (src/fhirpath/regex.ts) match exactly the strings fhirpath.js's
// matches() does, on generated patterns and strings; what the two engines would read differently is refused.

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database.drop());

const seed = Number(process.env.FHIRPATH_PROPERTY_SEED ?? '20261128');
const at = { line: 1, column: 1 };

/** fhirpath.js's answer: whether the string matches the pattern; undefined where it throws (an invalid pattern). */
function fhirpathMatches(text: string, pattern: string): boolean | undefined {
  try {
    const result = fhirpath.evaluate({}, '%text.matches(%pattern)', { text, pattern }) as unknown[];
    return result[0] as boolean;
  } catch {
    return undefined;
  }
}

// Characters the two engines could tell apart: cases, spaces JavaScript's \s knows and a locale might not, a digit
// outside ASCII, a character outside the Basic Multilingual Plane, a newline, and the syntax characters escaped.
const character = fc.constantFrom('a', 'b', 'A', 'é', '_', '1', '٣', ' ', '\u00a0', '\u2028', '\n', '😀', '-', '.');
const literal = fc.constantFrom('a', 'b', 'A', 'é', '1', ' ', '😀', '\\.', '-', '\\(', '\\u0041', '\\x61', '\\n');
const escape = fc.constantFrom('\\d', '\\D', '\\w', '\\W', '\\s', '\\S');
const classMember = fc.constantFrom('a', 'b-d', 'A-Z', '0-9', '\\d', '\\w', '\\s', 'é', '😀', '\\-', '\\]', 'a^', '.', '\\u00a0');
const characterClass = fc
  .tuple(fc.boolean(), fc.array(classMember, { minLength: 1, maxLength: 3 }))
  .map(([negated, members]) => `[${negated ? '^' : ''}${members.join('')}]`);
const quantifier = fc.constantFrom('', '', '*', '+', '?', '{2}', '{1,}', '{0,2}', '*?', '{1,3}?');

const { pattern } = fc.letrec<{ pattern: string; term: string }>((tie) => ({
  term: fc.oneof(
    { maxDepth: 3, depthIdentifier: 'pattern' },
    fc.tuple(fc.oneof(literal, escape, characterClass, fc.constant('.')), quantifier).map(([atom, q]) => `${atom}${q}`),
    fc.tuple(fc.constantFrom('(', '(?:'), tie('pattern'), quantifier).map(([open, inner, q]) => `${open}${inner})${q}`),
  ),
  pattern: fc
    .tuple(fc.constantFrom('', '', '^'), fc.array(tie('term'), { minLength: 1, maxLength: 3 }), fc.constantFrom('', '', '$'), fc.option(tie('term')))
    .map(([start, terms, end, alternative]) => `${start}${terms.join('')}${end}${alternative === null ? '' : `|${alternative}`}`),
}));

describe('matches() patterns in PostgreSQL', () => {
  it('match exactly the strings fhirpath.js matches, on generated patterns and strings', { timeout: 60_000 }, async () => {
    // The generator nests repetitions past what the compiler takes (100 characters expanded) now and then: those are refused, by name.
    const accepted = (source: string) => {
      try {
        postgresRegex(source, at);
        return true;
      } catch (error) {
        expect(error).toBeInstanceOf(FhirPathRefused);
        return false;
      }
    };
    const patterns = fc.sample(pattern, { numRuns: 300, seed }).filter(accepted);
    expect(patterns.length, `patterns taken among 300 (seed ${seed})`).toBeGreaterThan(200);
    const texts = fc.sample(
      fc.array(character, { maxLength: 5 }).map((characters) => characters.join('')),
      { numRuns: 60, seed: seed + 1 },
    );
    let compared = 0;
    let matched = 0;
    for (const source of patterns) {
      const rewritten = postgresRegex(source, at);
      const { rows } = await database.pool.query<{ matches: boolean }>(
        'SELECT text ~ $2 AS matches FROM unnest($1::text[]) WITH ORDINALITY AS texts(text, place) ORDER BY place',
        [texts, rewritten],
      );
      const disagreements = texts
        .map((text, index) => ({ text, postgres: rows[index]!.matches, fhirpath: fhirpathMatches(text, source) }))
        .filter((result) => result.postgres !== result.fhirpath);
      expect(disagreements.slice(0, 3), `${source} as ${rewritten} (seed ${seed})`).toEqual([]);
      compared += texts.length;
      matched += rows.filter((row) => row.matches).length;
    }
    // Both answers are common: a comparison that could only ever agree says nothing.
    expect(matched / compared, `share of matches (seed ${seed})`).toBeGreaterThan(0.1);
    expect(matched / compared, `share of matches (seed ${seed})`).toBeLessThan(0.9);
  });

  it.each([
    ['(a)\\1', 'the escape \\1'],
    ['a(?=b)', 'a group (?='],
    ['(?<name>a)', 'a group (?<'],
    ['\\bword', 'the word boundary \\b'],
    ['\\p{L}', 'the escape \\p'],
    ['a**', 'a quantifier * after a quantifier'],
    ['*a', 'a quantifier * with nothing to repeat'],
    ['[]', 'the empty class []'],
    ['[z-a]', 'the range z-a, out of order'],
    ['a{256}', "over PostgreSQL's 255"],
    ['(a{1,100}){1,100}', 'a pattern of 10000 characters'],
    ['((){255}){255}', 'a pattern of 65025 characters'],
    ['(?:(?:\\S?){250}){4}', 'a pattern of 1000 characters'],
    ['\\ud83d\\ude00', 'the escape \\ud83d, half of a surrogate pair'],
    ['(a', 'an unbalanced ('],
    ['a)', 'an unbalanced )'],
    ['a]', 'an unescaped ]'],
    ['\\u{1F600}', 'a \\u escape without four hexadecimal digits'],
  ])('refuses %s, naming %s', (source, reason) => {
    let refused: unknown;
    try {
      postgresRegex(source, at);
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(FhirPathRefused);
    expect((refused as FhirPathRefused).message).toContain(reason);
    expect((refused as FhirPathRefused).construct).toBe(`matches('${source}')`);
  });

  it('takes patterns PostgreSQL compiles: the largest it takes, whose repetitions expand to 100 characters', async () => {
    const { rows } = await database.pool.query<{ matches: boolean }>(`SELECT 'bbb' ~ $1 AS matches`, [postgresRegex('^([^a]{0,10}){0,9}$', at)]);
    expect(rows[0]!.matches).toBe(true);
  });
});
