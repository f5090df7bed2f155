import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import openapiTS, { astToString } from 'openapi-typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';

/**
 * The OpenAPI description at /docs/json is complete enough to generate a
 * typed client from: openapi-typescript (a maintained generator, which also
 * validates the document with Redocly) writes its types, and TypeScript checks
 * a few openapi-fetch calls written against them, wrong ones included.
 */

type Operation = {
  operationId?: string;
  tags?: string[];
  requestBody?: { content: Record<string, unknown> };
  responses: Record<string, { content?: Record<string, { schema?: unknown }> }>;
};
type Document = { paths: Record<string, Record<string, Operation>> };

let t: TestApp;
let document: Document;
let dir: string;

beforeAll(async () => {
  t = await startTestApp();
  document = (await t.app.inject({ method: 'GET', url: '/docs/json' })).json<Document>();
  // Inside the repository, so that the client files resolve openapi-fetch from its node_modules.
  dir = mkdtempSync(path.resolve('.openapi-client-'));
});

afterAll(async () => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  await t?.close();
});

const operations = () =>
  Object.entries(document.paths).flatMap(([url, methods]) => Object.entries(methods).map(([method, operation]) => ({ url, method, operation })));

describe('the OpenAPI description', () => {
  it('gives every operation a unique operationId, a tag, and a described success answer', () => {
    const all = operations();
    expect(all.length).toBeGreaterThanOrEqual(18);
    const ids = all.map(({ operation }) => operation.operationId);
    expect(ids.every((id) => typeof id === 'string')).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    for (const { url, method, operation } of all) {
      expect(operation.tags?.length, `${method} ${url}`).toBeGreaterThan(0);
      expect(
        Object.keys(operation.responses).some((status) => /^2\d\d$/.test(status) || status === '405'),
        `${method} ${url}`,
      ).toBe(true);
    }
  });

  it('answers FHIR routes in application/fhir+json, with OperationOutcomes for refusals, and documents the bodies it takes', () => {
    for (const { url, method, operation } of operations().filter(({ url }) => url.startsWith('/fhir/resources'))) {
      for (const [status, response] of Object.entries(operation.responses)) {
        if (status === '204') continue;
        expect(Object.keys(response.content ?? {}), `${method} ${url} ${status}`).toEqual(['application/fhir+json']);
      }
      expect(operation.responses['401'], `${method} ${url}`).toBeDefined();
    }
    const create = document.paths['/fhir/resources/Subscription']!.post!;
    expect(Object.keys(create.requestBody!.content)).toEqual(['application/fhir+json', 'application/json']);
    expect(JSON.stringify(create.requestBody)).toContain('Appointment?status=booked&_include=Appointment:patient');
    expect(JSON.stringify(document.paths['/fhir/resources/{type}']!.get)).toContain('_lastUpdated');
  });

  it("describes a Subscription's channel as its requests are checked: rest-hook with an endpoint, or websocket without one", () => {
    type Schema = { properties?: Record<string, Schema>; required?: string[]; anyOf?: Schema[]; const?: unknown; enum?: unknown[]; not?: unknown };
    const body = (document.paths['/fhir/resources/Subscription']!.post!.requestBody!.content['application/fhir+json'] as { schema: Schema }).schema;
    const channels = body.properties!.channel!.anyOf!;
    const ofType = (type: string) => channels.find((channel) => channel.properties!.type!.const === type || channel.properties!.type!.enum?.includes(type));
    expect(ofType('rest-hook')?.required).toContain('endpoint');
    expect(ofType('websocket')).toBeDefined();
    expect(ofType('websocket')!.required).toEqual(['type']);
    // Refused when given (JSON Schema's "must not be there").
    expect(ofType('websocket')!.properties!.endpoint).toEqual({ not: {} });
  });

  it('generates a typed client with openapi-typescript, against which right calls compile and wrong ones do not', { timeout: 60_000 }, async () => {
    writeFileSync(path.join(dir, 'api.d.ts'), astToString(await openapiTS(document as never)));
    writeFileSync(
      path.join(dir, 'calls.ts'),
      `import createClient from 'openapi-fetch';
import type { paths } from './api.d.ts';

const client = createClient<paths>({ baseUrl: 'http://localhost:8080', headers: { 'x-api-key': 'fwk_…' } });

export async function calls(): Promise<void> {
  const created = await client.POST('/fhir/resources/Subscription', {
    body: { resourceType: 'Subscription', status: 'requested', criteria: 'Appointment?status=booked', reason: 'r', channel: { type: 'rest-hook', endpoint: 'https://receiver.example.org/hooks' } },
  });
  const status: 'requested' | 'active' | 'error' | 'off' | undefined = created.data?.status;
  const refusal: string | undefined = created.error?.issue[0]?.code;
  const read = await client.GET('/fhir/resources/Subscription/{id}', { params: { path: { id: '3f9c2a4e-8b1d-4c7a-9e52-0d6b1f2a7c31' } } });
  const mode: 'match' | undefined = read.data?.search.mode;
  const found = await client.GET('/fhir/resources/{type}', { params: { path: { type: 'Appointment' }, query: { _count: '10', status: 'booked' } } });
  const entries: number | undefined = found.data?.entry?.length;
  const patient = await client.POST('/fhir/resources/{type}', { params: { path: { type: 'Patient' } }, body: { resourceType: 'Patient', active: true } });
  const version: string | undefined = patient.data?.meta?.versionId;
  const topic = { resourceType: 'Subscription', status: 'requested', criteria: 'http://example.org/topics/encounter-finished', reason: 'r' } as const;
  await client.POST('/fhir/resources/Subscription', { body: { ...topic, channel: { type: 'websocket', _payload: { extension: [{ url: 'x', valueCode: 'id-only' }] } } } });
  // @ts-expect-error: a subscription's channel is one the service has (rest-hook or websocket)
  await client.POST('/fhir/resources/Subscription', { body: { resourceType: 'Subscription', status: 'requested', criteria: 'Patient', reason: 'r', channel: { type: 'email', endpoint: 'x' } } });
  // @ts-expect-error: no such route
  await client.GET('/fhir/resources/Subscription/{id}/_history', { params: { path: { id: 'x' } } });
  void [status, refusal, mode, entries, version];
}
`,
    );
    const tsc = spawnSync(
      process.execPath,
      [
        path.resolve('node_modules/typescript/bin/tsc'),
        '--ignoreConfig',
        '--noEmit',
        '--strict',
        '--target',
        'es2022',
        '--module',
        'nodenext',
        '--moduleResolution',
        'nodenext',
        '--allowImportingTsExtensions',
        '--skipLibCheck',
        path.join(dir, 'calls.ts'),
      ],
      {
        encoding: 'utf8',
      },
    );
    expect(tsc.stdout + tsc.stderr).toBe('');
    expect(tsc.status).toBe(0);
  });
});
