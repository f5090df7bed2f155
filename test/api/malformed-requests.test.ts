import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
  await t.fhir('PUT', '/Patient/existing', { resourceType: 'Patient', id: 'existing' });
});
afterAll(() => t.close());

type Case = {
  name: string;
  method: 'GET' | 'POST' | 'PUT' | 'DELETE' | 'PATCH';
  path: string;
  body?: string;
  contentType?: string;
  headers?: Record<string, string>;
  status: number;
  code: string;
  text: RegExp;
};

const patient = JSON.stringify({ resourceType: 'Patient' });

const cases: Case[] = [
  // Said to be malformed JSON, where, and not blamed on its content type (as application/fhir+json or application/json alike).
  {
    name: 'malformed JSON',
    method: 'POST',
    path: '/Patient',
    body: '{"resourceType": "Patient",',
    status: 400,
    code: 'invalid',
    text: /^The body is not valid JSON: .*JSON at position 27/,
  },
  {
    name: 'malformed JSON with its context',
    method: 'POST',
    path: '/Patient',
    body: '{"resourceType": "Patient", "name": [}',
    contentType: 'application/json',
    status: 400,
    code: 'invalid',
    text: /^The body is not valid JSON: Unexpected token '\}', .*"name": \[\}/,
  },
  { name: 'an empty body', method: 'POST', path: '/Patient', body: '', status: 400, code: 'invalid', text: /empty/i },
  { name: 'a JSON array', method: 'POST', path: '/Patient', body: '[]', status: 400, code: 'invalid', text: /body/ },
  { name: 'no resourceType', method: 'POST', path: '/Patient', body: '{"active":true}', status: 400, code: 'invalid', text: /resourceType/ },
  {
    name: "a resourceType other than the URL's",
    method: 'POST',
    path: '/Patient',
    body: JSON.stringify({ resourceType: 'Observation' }),
    status: 400,
    code: 'invalid',
    text: /does not match the URL's type 'Patient'/,
  },
  {
    name: 'an unknown resource type',
    method: 'POST',
    path: '/Patientt',
    body: JSON.stringify({ resourceType: 'Patientt' }),
    status: 404,
    code: 'not-found',
    text: /Unknown resource type 'Patientt'/,
  },
  { name: 'an abstract type', method: 'GET', path: '/DomainResource/x', status: 404, code: 'not-found', text: /not a FHIR R4 resource type/ },
  { name: 'an invalid id', method: 'GET', path: '/Patient/has_underscore', status: 400, code: 'invalid', text: /Invalid resource id/ },
  { name: 'a too long id', method: 'PUT', path: `/Patient/${'a'.repeat(65)}`, body: patient, status: 400, code: 'invalid', text: /Invalid resource id/ },
  {
    name: 'an id with a NUL (quoted, as FHIR text cannot hold it)',
    method: 'GET',
    path: '/Patient/a%00b',
    status: 400,
    code: 'invalid',
    text: /^Invalid resource id "a\\u0000b"/,
  },
  {
    name: 'a number JSON cannot hold',
    method: 'POST',
    path: '/Patient',
    body: '{"resourceType":"Patient","multipleBirthInteger":1e400}',
    status: 400,
    code: 'invalid',
    text: /too large for JSON/,
  },
  { name: 'an update without id', method: 'PUT', path: '/Patient/existing', body: patient, status: 400, code: 'required', text: /has no id/ },
  {
    name: "an update whose id is not the URL's",
    method: 'PUT',
    path: '/Patient/existing',
    body: JSON.stringify({ resourceType: 'Patient', id: 'other' }),
    status: 400,
    code: 'invalid',
    text: /does not match the URL's id/,
  },
  {
    name: 'meta that is not an object',
    method: 'POST',
    path: '/Patient',
    body: JSON.stringify({ resourceType: 'Patient', meta: 'x' }),
    status: 400,
    code: 'structure',
    text: /meta/,
  },
  {
    name: 'a malformed If-Match',
    method: 'PUT',
    path: '/Patient/existing',
    body: JSON.stringify({ resourceType: 'Patient', id: 'existing' }),
    headers: { 'if-match': 'yesterday' },
    status: 400,
    code: 'invalid',
    text: /If-Match/,
  },
  { name: 'a non-numeric version', method: 'GET', path: '/Patient/existing/_history/latest', status: 400, code: 'invalid', text: /versionId/ },
  {
    name: 'an unsupported media type',
    method: 'POST',
    path: '/Patient',
    body: patient,
    contentType: 'text/plain',
    status: 415,
    code: 'not-supported',
    text: /content-type/i,
  },
  {
    name: 'an oversized body',
    method: 'POST',
    path: '/Patient',
    body: JSON.stringify({ resourceType: 'Patient', text: { div: 'x'.repeat(11 * 1024 * 1024) } }),
    status: 413,
    code: 'too-costly',
    text: /too large/i,
  },
  {
    name: 'a string jsonb cannot hold',
    method: 'POST',
    path: '/Patient',
    body: '{"resourceType":"Patient","name":[{"text":"nul \\u0000 inside"}]}',
    status: 400,
    code: 'invalid',
    text: /cannot be stored: unsupported Unicode escape sequence/,
  },
  { name: 'an unknown route', method: 'GET', path: '/Patient/existing/_nothing', status: 404, code: 'not-found', text: /There is no GET/ },
  {
    name: 'a method the path does not offer',
    method: 'POST',
    path: '/Patient/existing',
    body: patient,
    status: 405,
    code: 'not-supported',
    text: /POST is not supported on \/fhir\/resources\/Patient\/existing: it answers GET, PUT, PATCH, DELETE/,
  },
  {
    name: 'a method a route with a parameter took (DELETE /{Type})',
    method: 'DELETE',
    path: '/metadata',
    status: 405,
    code: 'not-supported',
    text: /DELETE is not supported on \/fhir\/resources\/metadata: it answers GET$/,
  },
  { name: 'GET of a search by POST', method: 'GET', path: '/Patient/_search', status: 405, code: 'not-supported', text: /it answers POST$/ },
  { name: 'POST to system history', method: 'POST', path: '/_history', body: patient, status: 405, code: 'not-supported', text: /it answers GET$/ },
  {
    name: 'a prototype-polluting body',
    method: 'POST',
    path: '/Patient',
    body: '{"resourceType":"Patient","__proto__":{"x":1}}',
    status: 400,
    code: 'invalid',
    text: /not valid JSON/,
  },
];

describe('a path outside the FHIR base', () => {
  it('is a 404 that names the base, and the path it meant', async () => {
    const response = await t.app.inject({ method: 'GET', url: '/fhir/Patient?name=x', headers: { 'x-api-key': t.apiKey } });
    expect(response.statusCode).toBe(404);
    expect(response.json().issue[0].details.text).toBe(
      'There is no GET /fhir/Patient: the FHIR base of this service is /fhir/resources (GET /fhir/resources/Patient)',
    );
  });
});

describe('malformed requests are answered 4xx with an OperationOutcome, never 5xx', () => {
  it.each(cases)('$name → $status', async ({ method, path, body, contentType, headers, status, code, text }) => {
    const response = await t.app.inject({
      method,
      url: `/fhir/resources${path}`,
      headers: {
        'x-api-key': t.apiKey,
        ...(body === undefined ? {} : { 'content-type': contentType ?? 'application/fhir+json' }),
        ...headers,
      },
      ...(body === undefined ? {} : { payload: body }),
    });
    expect(response.statusCode).toBe(status);
    expect(response.headers['content-type']).toContain('application/fhir+json');
    const outcome = response.json();
    expect(outcome.resourceType).toBe('OperationOutcome');
    expect(outcome.issue[0]).toMatchObject({ severity: 'error', code });
    expect(outcome.issue[0].details.text).toMatch(text);
  });
});

describe('dot segments as an id, sent as they are', () => {
  let listening: TestApp;
  beforeAll(async () => {
    listening = await startTestApp({ listen: true });
  });
  afterAll(() => listening.close());
  /** A GET of `path` over a real socket, the path sent byte for byte (fetch would resolve %2e%2e as '..' and send the FHIR base). */
  const rawGet = (port: string, path: string, apiKey: string) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const sent = request({ host: '127.0.0.1', port, path, headers: { 'x-api-key': apiKey } }, (response) => {
        let body = '';
        response.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode!, body }));
      });
      sent.on('error', reject).end();
    });

  it.each([
    ['/Patient/%2e%2e', 'Patient/.. is not known'],
    ['/Patient/..', 'Patient/.. is not known'],
    ['/Patient/%2E', 'Patient/. is not known'],
    ['/Patient/%2e%2e/_history', 'Patient/.. is not known'],
    ['/Subscription/%2e%2e', 'Subscription/.. is not known'],
  ])('GET %s is a 404 for that id: the service resolves no dot segment', async (path, text) => {
    const answer = await rawGet(new URL(listening.baseUrl).port, `/fhir/resources${path}`, listening.apiKey);
    expect(answer.status, answer.body).toBe(404);
    expect(JSON.parse(answer.body)).toMatchObject({ resourceType: 'OperationOutcome', issue: [{ code: 'not-found', details: { text } }] });
  });
});
