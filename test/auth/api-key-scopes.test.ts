import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/auth/api-keys.ts';
import { startTestApp, type TestApp } from '../support/app.ts';

/** API key scopes, and subscriptions owned by the key that created them (migration 0013). */

let t: TestApp;
const keys: Record<string, string> = {};
beforeAll(async () => {
  t = await startTestApp();
  keys.reader = (await createApiKey(t.database.db, 'reader', ['read'])).key;
  keys.alice = (await createApiKey(t.database.db, 'alice', ['read', 'write'])).key;
  keys.bob = (await createApiKey(t.database.db, 'bob', ['read', 'write'])).key;
  // t.apiKey has every scope, admin included.
  keys.admin = t.apiKey;
});
afterAll(() => t.close());

const as = (who: string, method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, body?: unknown, headers: Record<string, string> = {}) =>
  t.fhir(method, path, body, { 'x-api-key': keys[who]!, ...headers });

const subscription = (criteria: string, status = 'requested') => ({
  resourceType: 'Subscription',
  status,
  criteria,
  reason: 'test',
  channel: {
    type: 'rest-hook',
    endpoint: 'http://127.0.0.1:9/hook',
    payload: 'application/fhir+json',
    header: ['secret: alice-secret', 'Authorization: Bearer alice-token'],
  },
});

describe('scopes', () => {
  it('a read key reads and searches, POST _search included, but writes nothing (403 naming the scope)', async () => {
    expect((await as('reader', 'GET', '/Patient')).statusCode).toBe(200);
    expect((await as('reader', 'POST', '/Patient/_search', 'active=true', { 'content-type': 'application/x-www-form-urlencoded' })).statusCode).toBe(200);
    for (const [method, path, body] of [
      ['POST', '/Patient', { resourceType: 'Patient' }],
      ['PUT', '/Patient/p1', { resourceType: 'Patient', id: 'p1' }],
      ['DELETE', '/Patient/p1', undefined],
      ['POST', '/Bundle', { resourceType: 'Bundle', type: 'batch', entry: [] }],
      ['POST', '/Subscription', subscription('Patient?active=true')],
    ] as const) {
      const response = await as('reader', method, path, body);
      expect(response.statusCode, `${method} ${path}`).toBe(403);
      expect(response.json().issue[0]).toMatchObject({ code: 'forbidden', details: { text: 'This API key lacks the write scope (it has read)' } });
    }
  });
});

describe('subscriptions belong to the key that created them', () => {
  let alices: string;
  beforeAll(async () => {
    const created = await as('alice', 'POST', '/Subscription', subscription('Observation?status=final'));
    expect(created.statusCode).toBe(201);
    alices = created.json().id;
  });

  it('another key without admin neither reads, finds nor switches it off; its secrets stay hidden', async () => {
    expect((await as('bob', 'GET', `/Subscription/${alices}`)).statusCode).toBe(404);
    const search = (await as('bob', 'GET', '/Subscription')).json();
    expect(JSON.stringify(search)).not.toContain('alice-');
    const off = await as('bob', 'POST', '/Subscription', subscription('Observation?status=final', 'off'));
    expect(off.statusCode).toBe(400);
    expect(JSON.stringify(off.json())).toMatch(/Not found webhook active or requested for criteria=Observation\?status=final/);
    const { rows } = await t.database.pool.query('SELECT status FROM webhook.subscriptions WHERE id = $1', [alices]);
    expect(rows[0].status).toBe('requested');
    // Nor through a Bundle.
    const bundle = await as('bob', 'POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [{ request: { method: 'GET', url: `Subscription/${alices}` } }],
    });
    expect(bundle.json().entry[0].response.status).toMatch(/^404/);
  });

  it('the one-live-subscription-per-criteria rule is per key: bob has his own for the same criteria (migration 0032)', async () => {
    const bobs = await as('bob', 'POST', '/Subscription', subscription('Observation?status=final'));
    expect(bobs.statusCode).toBe(201);
    expect(bobs.json().id).not.toBe(alices);
    expect(bobs.body).not.toContain(alices);
  });

  it('its creator reads, finds and switches it off; an admin key reads it, and its switch-off by criteria ends only its own', async () => {
    expect((await as('alice', 'GET', `/Subscription/${alices}`)).statusCode).toBe(200);
    expect((await as('admin', 'GET', `/Subscription/${alices}`)).json().resource.channel.header).toContain('secret: alice-secret');
    const found = (await as('alice', 'GET', '/Subscription')).json();
    expect(found.entry.map((entry: { resource: { id: string } }) => entry.resource.id)).toEqual([alices]);
    expect((await as('admin', 'POST', '/Subscription', subscription('Observation?status=final', 'off'))).statusCode).toBe(400);
    const off = await as('alice', 'POST', '/Subscription', subscription('Observation?status=final', 'off'));
    expect(off.statusCode).toBe(200);
    expect(off.json()).toMatchObject({ id: alices, status: 'off' });
  });
});
