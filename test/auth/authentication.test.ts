import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey, listApiKeys, registerApiKey, revokeApiKey } from '../../src/auth/api-keys.ts';
import { startTestApp, type TestApp } from '../support/app.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

async function getMetadata(headers: Record<string, string>) {
  return t.app.inject({ method: 'GET', url: '/fhir/resources/metadata', headers });
}

describe('x-api-key authentication', () => {
  it.each([
    ['missing', {}, 'Missing x-api-key header'],
    ['empty', { 'x-api-key': '' }, 'Missing x-api-key header'],
    ['unknown', { 'x-api-key': 'fwk_not-a-key' }, 'Unknown or revoked API key'],
  ])('a %s key is answered 401 with an OperationOutcome', async (_case, headers, text) => {
    const response = await getMetadata(headers);
    expect(response.statusCode).toBe(401);
    expect(response.headers['content-type']).toContain('application/fhir+json');
    expect(response.json()).toEqual({
      resourceType: 'OperationOutcome',
      issue: [{ severity: 'error', code: 'security', details: { text } }],
    });
  });

  it('every route under /fhir/resources needs the key, writes included', async () => {
    const write = await t.app.inject({ method: 'POST', url: '/fhir/resources/Patient', payload: { resourceType: 'Patient' } });
    expect(write.statusCode).toBe(401);
    const bundle = await t.app.inject({ method: 'POST', url: '/fhir/resources/Bundle', payload: { resourceType: 'Bundle', type: 'batch' } });
    expect(bundle.statusCode).toBe(401);
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS n FROM fhir.resources');
    expect(rows[0].n).toBe(0);
  });

  it('every route the OpenAPI description lists needs the key, but /healthz, /readyz and /metrics', async () => {
    const { paths } = (await t.app.inject({ method: 'GET', url: '/docs/json' })).json<{ paths: Record<string, Record<string, unknown>> }>();
    // /metrics when the app serves them (the service does, unless METRICS_PORT moves them).
    const open = ['/healthz', '/readyz', '/metrics'];
    expect(Object.keys(paths)).toEqual(expect.arrayContaining(['/healthz', '/readyz']));
    const guarded = Object.entries(paths)
      .filter(([path]) => !open.includes(path))
      .flatMap(([path, operations]) =>
        Object.keys(operations).map((method) => ({ method: method.toUpperCase(), url: path.replace('{type}', 'Patient').replace(/\{\w+\}/g, '1') })),
      );
    expect(guarded.length).toBeGreaterThanOrEqual(15);
    for (const { method, url } of guarded) {
      const response = await t.app.inject({ method: method as 'GET', url, ...(method === 'GET' || method === 'DELETE' ? {} : { payload: {} }) });
      expect({ method, url, status: response.statusCode }).toEqual({ method, url, status: 401 });
    }
  });

  it('a revoked key stops working at once', async () => {
    const { id, key } = await createApiKey(t.database.db, 'short-lived');
    expect((await getMetadata({ 'x-api-key': key })).statusCode).toBe(200);
    expect(await revokeApiKey(t.database.db, id)).toBe(true);
    expect(await revokeApiKey(t.database.db, id)).toBe(false);
    expect((await getMetadata({ 'x-api-key': key })).statusCode).toBe(401);
    const listed = (await listApiKeys(t.database.db)).find((apiKey) => apiKey.id === id);
    expect(listed?.revokedAt).toBeInstanceOf(Date);
  });

  it('stores keys only as SHA-256 digests', async () => {
    const { key } = await createApiKey(t.database.db, 'hashed');
    const { rows } = await t.database.pool.query(`SELECT key_sha256 FROM webhook.api_keys WHERE name = 'hashed'`);
    expect(rows[0].key_sha256).toMatch(/^[0-9a-f]{64}$/);
    const dump = JSON.stringify((await t.database.pool.query('SELECT * FROM webhook.api_keys')).rows);
    expect(dump).not.toContain(key);
  });

  it('registers a bootstrap key idempotently', async () => {
    const key = 'compose-file-key-0123456789';
    await registerApiKey(t.database.db, 'bootstrap', key);
    await registerApiKey(t.database.db, 'bootstrap', key);
    expect((await listApiKeys(t.database.db)).filter((apiKey) => apiKey.name === 'bootstrap')).toHaveLength(1);
    expect((await getMetadata({ 'x-api-key': key })).statusCode).toBe(200);
  });

  it('health and readiness need no key', async () => {
    expect((await t.app.inject({ method: 'GET', url: '/healthz' })).json()).toEqual({ status: 'ok' });
    const ready = await t.app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(200);
    expect(ready.json()).toEqual({ status: 'ready' });
  });

  it('never writes the key into the request log', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'trace' }, { write: (line: string) => void lines.push(line) });
    const { buildApp } = await import('../../src/api/app.ts');
    const app = await buildApp({
      database: t.database,
      baseUrl: 'http://fhir.test',
      webhookNamingSystem: 'webhook',
      secretsEncryptionKey: Buffer.alloc(32),
      logger,
    });
    await app.inject({ method: 'GET', url: '/fhir/resources/metadata', headers: { 'x-api-key': t.apiKey } });
    await app.close();
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.join('')).not.toContain(t.apiKey);
  });
});

describe('readiness', () => {
  it('answers 503 while a migration is pending', async () => {
    await t.database.pool.query(`DELETE FROM pgmigrations WHERE name = '0001_fhir_resource_store'`);
    try {
      const ready = await t.app.inject({ method: 'GET', url: '/readyz' });
      expect(ready.statusCode).toBe(503);
      expect(ready.json()).toMatchObject({ status: 'not ready', pending: ['0001_fhir_resource_store'] });
    } finally {
      await t.database.pool.query(`INSERT INTO pgmigrations (name, run_on) VALUES ('0001_fhir_resource_store', now())`);
    }
  });
});

describe('API documentation', () => {
  it('serves the OpenAPI description at /docs without a key, with the FHIR routes and the key scheme', async () => {
    const ui = await t.app.inject({ method: 'GET', url: '/docs' });
    expect(ui.statusCode).toBeLessThan(400);
    const response = await t.app.inject({ method: 'GET', url: '/docs/json' });
    expect(response.statusCode).toBe(200);
    const openapi = response.json();
    expect(openapi.components.securitySchemes.apiKey).toEqual({ type: 'apiKey', in: 'header', name: 'x-api-key' });
    expect(Object.keys(openapi.paths)).toEqual(
      expect.arrayContaining(['/fhir/resources/{type}', '/fhir/resources/{type}/{id}', '/fhir/resources/Bundle', '/fhir/resources/metadata']),
    );
  });
});
