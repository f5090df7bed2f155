import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { storesInvalidContentOnPurpose } from '../support/validate-answers.ts';

/**
 * Property-based fuzzing of every route with hostile input: random JSON,
 * criteria and search strings, header lists, deep nesting, huge strings,
 * invalid UTF-8 and percent-encodings, NUL bytes, numbers out of range. Each
 * answer must be a non-5xx, and a 4xx must be an OperationOutcome.
 * FUZZ_SEED=<n> for other cases; the seed is fixed so that the suite gates CI
 * (fast-check names it in a failure).
 */

storesInvalidContentOnPurpose('random JSON is written as Patients and in Bundles: the store keeps what it is sent');

const seed = Number(process.env.FUZZ_SEED ?? '20261122');
const numRuns = Number(process.env.FUZZ_RUNS ?? '150');

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
  await t.fhir('PUT', '/Patient/existing', { resourceType: 'Patient', id: 'existing', active: true });
});
afterAll(() => t.close());

/** Text that is hard on a parser: control characters, lone surrogates, NUL, escapes, jsonpath and SQL syntax, long runs. */
const nasty = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom(
    '\u0000',
    '\ud800',
    '\udfff',
    '%00',
    '%',
    '%zz',
    '%ED%A0%80',
    '") || true || ("',
    "'; --",
    '$',
    '@',
    '\\',
    '|',
    ',',
    '$.**',
    '*',
    '..',
    '😀',
    '\r\n',
  ),
  fc.nat({ max: 5000 }).map((length) => 'x'.repeat(length)),
  fc.double().map(String),
  fc.bigInt().map(String),
);

const token = fc.constantFrom(
  'name',
  'family',
  '_id',
  'identifier',
  'birthdate',
  'general-practitioner',
  'active',
  '_lastUpdated',
  '_count',
  '_sort',
  '_include',
  '_revinclude',
  '_has',
  '_summary',
  '_elements',
  '_page_token',
  'link.identifier',
  'nonsense',
  '',
);
const modifier = fc.constantFrom('', ':exact', ':contains', ':missing', ':not', ':text', ':above', ':below', ':Patient', ':iterate', ':x');
const prefix = fc.constantFrom('', 'eq', 'ne', 'gt', 'ap', 'sa', 'zz');
/** A raw query string: sometimes well-formed, often not. */
const rawQuery = fc
  .array(fc.tuple(token, modifier, prefix, nasty), { maxLength: 4 })
  .map((pairs) => pairs.map(([name, mod, pre, value]) => `${name}${mod}=${pre}${encodeURIComponentLoose(value)}`).join('&'));

function encodeURIComponentLoose(text: string): string {
  try {
    return encodeURIComponent(text);
  } catch {
    // A lone surrogate cannot be encoded: sent raw, as a hostile client would.
    return text;
  }
}

/** JSON nested `depth` deep. */
const deep = fc.integer({ min: 50, max: 5000 }).map((depth) => `{"resourceType":"Patient","extension":${'['.repeat(depth)}${']'.repeat(depth)}}`);
const jsonBody = fc.oneof(
  fc.json({ maxDepth: 4 }),
  fc
    .jsonValue({ maxDepth: 3 })
    .map((value) =>
      JSON.stringify({ resourceType: 'Patient', ...(typeof value === 'object' && value !== null && !Array.isArray(value) ? value : { x: value }) }),
    ),
  deep,
  nasty,
  fc.constant('{"resourceType":"Patient","__proto__":{"admin":true}}'),
  fc.constant('{"resourceType":"Patient","name":[{"text":"\\u0000"}]}'),
  fc.constant('{"resourceType":"Patient","multipleBirthInteger":1e400}'),
);
const header = fc.oneof(
  nasty,
  fc.tuple(fc.constantFrom('secret', 'Authorization', 'Host', 'X-A', 'Content-Length', ''), nasty).map(([name, value]) => `${name}: ${value}`),
);
const subscriptionBody = fc
  .record(
    {
      resourceType: fc.constantFrom('Subscription', 'Patient', 7),
      status: fc.constantFrom('requested', 'off', 'active', 'x', null),
      criteria: fc.oneof(
        fc.tuple(fc.constantFrom('Patient', 'Appointment', 'Nope', ''), rawQuery).map(([type, query]) => `${type}?${query}`),
        nasty,
      ),
      reason: fc.oneof(fc.constant('fuzz'), nasty),
      channel: fc.record(
        {
          type: fc.constantFrom('rest-hook', 'email', 3),
          endpoint: fc.oneof(fc.constant('http://127.0.0.1:9/hook'), fc.constant('http://u:p@127.0.0.1:9/?token=a'), nasty),
          payload: fc.constantFrom('application/fhir+json', 'application/xml'),
          header: fc.array(header, { maxLength: 5 }),
        },
        { requiredKeys: [] },
      ),
    },
    { requiredKeys: [] },
  )
  .map((body) => JSON.stringify(body));
const bundleBody = fc
  .record({
    resourceType: fc.constant('Bundle'),
    type: fc.constantFrom('transaction', 'batch', 'collection', 'x'),
    entry: fc.array(
      fc.record(
        {
          fullUrl: fc.oneof(fc.constant('urn:uuid:0c3e1b5e-0000-4000-8000-000000000001'), nasty),
          resource: fc.jsonValue({ maxDepth: 2 }),
          request: fc.record(
            {
              method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH'),
              url: fc.oneof(fc.constantFrom('Patient', 'Patient/existing', 'Subscription'), nasty),
            },
            { requiredKeys: [] },
          ),
        },
        { requiredKeys: [] },
      ),
      { maxLength: 4 },
    ),
  })
  .map((body) => JSON.stringify(body));

type Request = { method: 'GET' | 'POST' | 'PUT' | 'DELETE'; url: string; payload?: string; contentType?: string };

const requests: fc.Arbitrary<Request> = fc.oneof(
  rawQuery.map((query): Request => ({ method: 'GET', url: `/fhir/resources/Patient?${query}` })),
  rawQuery.map((query): Request => ({ method: 'GET', url: `/fhir/resources/Subscription?${query}` })),
  rawQuery.map((query): Request => ({
    method: 'POST',
    url: '/fhir/resources/Patient/_search',
    payload: query,
    contentType: 'application/x-www-form-urlencoded',
  })),
  nasty.map((id): Request => ({ method: 'GET', url: `/fhir/resources/Patient/${encodeURIComponentLoose(id)}` })),
  nasty.map((id): Request => ({ method: 'GET', url: `/fhir/resources/Subscription/${encodeURIComponentLoose(id)}` })),
  jsonBody.map((payload): Request => ({ method: 'POST', url: '/fhir/resources/Patient', payload })),
  jsonBody.map((payload): Request => ({ method: 'PUT', url: '/fhir/resources/Patient/existing', payload })),
  subscriptionBody.map((payload): Request => ({ method: 'POST', url: '/fhir/resources/Subscription', payload })),
  bundleBody.map((payload): Request => ({ method: 'POST', url: '/fhir/resources/Bundle', payload })),
  fc.constantFrom<Request>(
    { method: 'GET', url: '/fhir/resources/Patient/existing/_history/%00' },
    { method: 'DELETE', url: '/fhir/resources/Patient/%F0%9F' },
  ),
);

describe('every route answers hostile input with a 4xx OperationOutcome (or a success), never a 5xx', () => {
  it(`${numRuns} generated requests`, { timeout: 300_000 }, async () => {
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(requests, async (request) => {
        const response = await t.app.inject({
          method: request.method,
          url: request.url,
          headers: { 'x-api-key': t.apiKey, 'content-type': request.contentType ?? 'application/fhir+json' },
          ...(request.payload === undefined ? {} : { payload: request.payload }),
        });
        statuses.set(response.statusCode, (statuses.get(response.statusCode) ?? 0) + 1);
        expect(
          response.statusCode,
          `${request.method} ${request.url.slice(0, 300)} ${request.payload?.slice(0, 300) ?? ''}\n${response.body.slice(0, 500)}`,
        ).toBeLessThan(500);
        if (response.statusCode >= 400) expect(response.json<{ resourceType: string }>().resourceType).toBe('OperationOutcome');
      }),
      { numRuns, seed },
    );
    console.log(`answers by status: ${JSON.stringify(Object.fromEntries(statuses))}`);
    // The generator reaches both the refusals and the successes.
    expect(statuses.get(400) ?? 0).toBeGreaterThan(10);
    expect([...statuses.keys()].some((status) => status < 300)).toBe(true);
  });
});
