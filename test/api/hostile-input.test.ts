import { connect } from 'node:net';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type AppOptions } from '../../src/api/app.ts';
import { createApiKey } from '../../src/auth/api-keys.ts';
import { createLogger } from '../../src/config/logger.ts';
import { connectDatabase } from '../../src/db/database.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { storesInvalidContentOnPurpose } from '../support/validate-answers.ts';

/**
 * What a hostile probe of the service found: inputs that answered 500 (or
 * worse) instead of a clear 4xx OperationOutcome. Each is a regression test.
 */

storesInvalidContentOnPurpose('hostile inputs the store accepts as sent: a text.div over 1 MB');

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

/** An API on the test database with some of its bounds changed (the shared one keeps the defaults). */
const appWith = (options: Partial<AppOptions>) =>
  buildApp({
    database: t.database,
    baseUrl,
    webhookNamingSystem: 'webhook',
    secretsEncryptionKey: testSecretsKey,
    logger: pino({ level: 'silent' }),
    ...options,
  });

const subscription = (criteria: string, extra: Record<string, unknown> = {}) => ({
  resourceType: 'Subscription',
  status: 'requested',
  criteria,
  reason: 'test',
  channel: { type: 'rest-hook', endpoint: 'http://127.0.0.1:9/hook', payload: 'application/fhir+json' },
  ...extra,
});

function expectRefusal(response: { statusCode: number; json(): unknown; body: string }, message: RegExp) {
  expect(response.statusCode, response.body).toBe(400);
  const outcome = response.json() as { resourceType: string; issue: { details: { text: string } }[] };
  expect(outcome.resourceType).toBe('OperationOutcome');
  expect(outcome.issue[0]!.details.text).toMatch(message);
}

describe('values that once answered 500', () => {
  it.each([
    ['/Patient?name=%00', /NUL/],
    ['/Patient?_id=%00', /NUL/],
    ['/Patient?identifier=a%00b', /NUL/],
    ['/Patient?_page_token=' + Buffer.from(JSON.stringify(['_lastUpdated', 'not a date', 'x'])).toString('base64url'), /Invalid _page_token/],
    ['/Patient?_page_token=' + Buffer.from(JSON.stringify(['_lastUpdated', '2026-13-45T99:00:00Z', 'x'])).toString('base64url'), /Invalid _page_token/],
  ])('GET %s is a 400', async (path, message) => {
    expectRefusal(await t.fhir('GET', path), message);
  });

  it.each([
    ['criteria with NUL', subscription('Patient?name=a\u0000b'), /NUL/],
    ['criteria with a lone surrogate', subscription('Patient?name=a\ud800b'), /surrogate|UTF-16/],
    [
      'an endpoint with NUL',
      subscription('Patient?active=true', { channel: { type: 'rest-hook', endpoint: 'http://127.0.0.1:9/a\u0000', payload: 'application/fhir+json' } }),
      /NUL|endpoint/,
    ],
  ])('a Subscription with %s is a 400', async (_, body, message) => {
    expectRefusal(await t.fhir('POST', '/Subscription', body), message);
  });

  it('JSON nested 10,000 deep is a 400', async () => {
    const deep = `{"resourceType":"Patient","extension":${'['.repeat(10_000)}${']'.repeat(10_000)}}`;
    const response = await t.fhir('POST', '/Patient', deep);
    expectRefusal(response, /nest/i);
  });
});

describe('lengths', () => {
  it('refuses criteria over 16,384 characters, naming the limit', async () => {
    const long = `Patient?${Array.from({ length: 17 }, () => `name=${'a'.repeat(1_000)}`).join('&')}`;
    expectRefusal(await t.fhir('POST', '/Subscription', subscription(long)), /the limit is 16,384/);
  });

  it("accepts criteria of HAPI's matcher case (51 alternatives of 200 characters, 3 bytes each in UTF-8: far past a btree entry), and a second live one is the duplicate it is", async () => {
    // Random so that no compression brings it under a btree entry's 2,704 bytes: the indexes hold its digest (migrations 0011, 0023).
    const alternative = (index: number) =>
      Array.from({ length: 200 }, (_, position) => String.fromCodePoint(0x4e00 + ((index * 7919 + position * 104_729) % 20_000))).join('');
    const criteria = `Patient?name=${Array.from({ length: 51 }, (_, index) => alternative(index)).join(',')}`;
    expect(Buffer.byteLength(criteria)).toBeGreaterThan(30_000);
    const first = await t.fhir('POST', '/Subscription', subscription(criteria));
    expect(first.statusCode, first.body).toBe(201);
    const second = await t.fhir('POST', '/Subscription', subscription(criteria));
    expectRefusal(second, /already has a live/);
    // Switched off by its criteria, found by digest and text.
    const off = await t.fhir('POST', '/Subscription', { ...subscription(criteria), status: 'off' });
    expect(off.statusCode, off.body).toBe(200);
    expect(off.json().id).toBe(first.json().id);
  });

  it('accepts criteria whose token is 1,000 random CJK characters (3,000 bytes, past a btree entry): not indexed as a match term, and still matches what it selects', async () => {
    const value = Array.from({ length: 1_000 }, (_, position) => String.fromCodePoint(0x4e00 + ((position * 104_729) % 20_000))).join('');
    const created = await t.fhir('POST', '/Subscription', subscription(`Patient?identifier=${encodeURIComponent(value)}`));
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().id as string;
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS terms FROM webhook.subscription_match_terms WHERE subscription_id = $1', [id]);
    expect(rows[0].terms).toBe(0);
    // Active, it is evaluated on every Patient written, and records the one that holds the value.
    await t.database.pool.query(`UPDATE webhook.subscriptions SET status = 'active' WHERE id = $1`, [id]);
    for (const [patientId, identifier] of [
      ['cjk-match', value],
      ['cjk-other', 'x'],
    ]) {
      expect((await t.fhir('PUT', `/Patient/${patientId}`, { resourceType: 'Patient', id: patientId, identifier: [{ value: identifier }] })).statusCode).toBe(
        201,
      );
    }
    const events = await t.database.pool.query('SELECT resource_id FROM webhook.subscription_events WHERE subscription_id = $1', [id]);
    expect(events.rows.map((row) => row.resource_id)).toEqual(['cjk-match']);
  });

  it('refuses a search value (or one of its comma-separated alternatives) over 1,024 characters, naming the limit', async () => {
    expectRefusal(await t.fhir('GET', `/Patient?name:contains=${'a'.repeat(1_500)}`), /its value has 1,500 characters; the limit is 1,024/);
    expectRefusal(await t.fhir('GET', `/Patient?name:contains=a,${'a'.repeat(1_500)}`), /its alternative 2 of 2 has 1,500 characters; the limit is 1,024/);
  });

  it('refuses a 1 MB query in a POST _search body with 400 too-costly, before reading its parameters', async () => {
    const started = performance.now();
    const response = await t.app.inject({
      method: 'POST',
      url: '/fhir/resources/Patient/_search',
      headers: { 'x-api-key': t.apiKey, 'content-type': 'application/x-www-form-urlencoded' },
      payload: Array.from({ length: 1_000 }, () => `name:contains=${'a'.repeat(1_000)}`).join('&'),
    });
    expectRefusal(response, /The search query has 1,014,999 characters; the limit is 16,384/);
    expect(response.json()).toMatchObject({ issue: [{ code: 'too-costly' }] });
    expect(performance.now() - started).toBeLessThan(1_000);
  });
});

describe('bounds on what one request may hold', () => {
  /**
   * Sends `head` and the body's first byte to an app with a 500 ms request
   * timeout, then a byte every 100 ms: what the server answered by the time it
   * closed the connection, or undefined if it was still open after 5 s.
   */
  async function trickle(head: string): Promise<{ answer: string | undefined; elapsedMs: number }> {
    const app = await appWith({ requestTimeoutMs: 500 });
    const address = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const socket = connect(Number(new URL(address).port), '127.0.0.1');
      const started = performance.now();
      const closed = new Promise<string>((resolve) => {
        let answer = '';
        socket.on('data', (chunk) => (answer += chunk.toString()));
        socket.on('close', () => resolve(answer));
      });
      socket.write(`${head}\r\n\r\n{`);
      const bytes = setInterval(() => socket.writable && socket.write(' '), 100);
      const answer = await Promise.race([closed, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 5_000))]);
      clearInterval(bytes);
      socket.destroy();
      return { answer, elapsedMs: performance.now() - started };
    } finally {
      await app.close();
    }
  }

  it('a body trickled byte by byte is cut off at the request timeout', async () => {
    const { answer } = await trickle(
      `POST /fhir/resources/Patient HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${t.apiKey}\r\nContent-Type: application/fhir+json\r\nContent-Length: 1000`,
    );
    expect(answer, 'the connection is still open after 5 s').toBeDefined();
    expect(answer).toMatch(/^HTTP\/1.1 408/);
    expect(answer).toContain('"resourceType":"OperationOutcome"');
  });

  it.each([
    ['POST /fhir/resources/Patient', 'Upgrade: websocket', 400],
    ['POST /fhir/resources/Patient', 'Upgrade: h2c', 400],
    ['GET /nothing', 'Upgrade: websocket', 404],
    // Routes registered before the websocket channel's.
    ['GET /healthz', 'Upgrade: websocket', 200],
    ['GET /console/api/subscriptions', 'Upgrade: websocket', 200],
  ])('%s asking for an upgrade (%s) is answered (%i) and its connection closed: a body trickled after it holds nothing', async (request, upgrade, status) => {
    // Node hands a request that asks for an upgrade to the 'upgrade' listener, and no longer times it out.
    const { answer, elapsedMs } = await trickle(
      `${request} HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${t.apiKey}\r\nConnection: Upgrade\r\n${upgrade}\r\nContent-Type: application/fhir+json\r\nContent-Length: 100000`,
    );
    expect(answer, 'the connection is still open after 5 s').toBeDefined();
    expect(answer).toMatch(new RegExp(`^HTTP/1.1 ${status} `));
    if (status !== 200) expect(answer).toContain('"resourceType":"OperationOutcome"');
    expect(elapsedMs).toBeLessThan(5_000);
  });

  it('a query of 16,384 characters fits the request head; a head past 32 KiB is 431 with an OperationOutcome', async () => {
    const app = await appWith({});
    const address = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const get = (query: string) => fetch(`${address}/fhir/resources/Patient?${query}`, { headers: { 'x-api-key': t.apiKey } });
      const fits = await get(`_id=${'a,'.repeat(8_000)}b&_count=1&_total=${'n'.repeat(300)}`.slice(0, 16_384));
      expect(fits.status).not.toBe(431);
      const tooLarge = await get(`_id=${'a'.repeat(40_000)}`);
      expect(tooLarge.status).toBe(431);
      expect(await tooLarge.json()).toMatchObject({
        resourceType: 'OperationOutcome',
        issue: [{ code: 'too-costly', details: { text: expect.stringContaining('32 KiB') } }],
      });
    } finally {
      await app.close();
    }
  });

  it('a statement past the statement_timeout of API sessions answers 503 timeout, not 500', async () => {
    const database = connectDatabase(t.database.url, () => undefined, { settings: { statement_timeout: '1ms' } });
    const app = await appWith({ database });
    try {
      await t.database.pool.query(
        `INSERT INTO fhir.resources (content) SELECT jsonb_build_object('resourceType', 'Patient', 'name', jsonb_build_array(jsonb_build_object('family', 'Family' || n))) FROM generate_series(1, 5000) n`,
      );
      const response = await app.inject({
        method: 'GET',
        url: `/fhir/resources/Patient?name:contains=${'x'.repeat(500)}&_total=accurate`,
        headers: { 'x-api-key': t.apiKey },
      });
      expect(response.statusCode, response.body).toBe(503);
      expect(response.json().issue[0]).toMatchObject({ code: 'timeout', details: { text: expect.stringMatching(/longer than the database allows/) } });
    } finally {
      await app.close();
      await database.close();
    }
  });
});

describe('bounds on one answer', () => {
  it('refuses a transaction Bundle of more than 1,000 entries with 413 too-costly, before doing any of it', async () => {
    const entry = Array.from({ length: 1_001 }, () => ({
      resource: { resourceType: 'Basic', code: { text: 'x' } },
      request: { method: 'POST', url: 'Basic' },
    }));
    const response = await t.fhir('POST', '/Bundle', { resourceType: 'Bundle', type: 'transaction', entry });
    expect(response.statusCode).toBe(413);
    expect(response.json().issue[0]).toMatchObject({ code: 'too-costly', details: { text: expect.stringMatching(/1,001 entries; the limit is 1,000/) } });
    const { rows } = await t.database.pool.query(`SELECT count(*)::int AS count FROM fhir.resources WHERE resource_type = 'Basic'`);
    expect(rows[0].count).toBe(0);
  });

  it('ends a page early when its matches pass 16 MiB of JSON, and the next link goes on from there', async () => {
    // Three 7 MiB Patients: a page of _count=3 holds two of them.
    await t.database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Patient', 'id', 'big' || n, 'text', jsonb_build_object('status', 'generated', 'div', repeat('x', 7 * 1024 * 1024)))
       FROM generate_series(1, 3) n`,
    );
    const first = await t.fhir('GET', '/Patient?_id=big1,big2,big3&_count=3');
    expect(first.statusCode).toBe(200);
    const page = first.json<{ entry: { resource: { id: string } }[]; link: { relation: string; url: string }[] }>();
    expect(page.entry.map((entry) => entry.resource.id)).toEqual(['big1', 'big2']);
    const next = page.link.find((link) => link.relation === 'next')!.url.replace('http://fhir.test/fhir/resources', '');
    const second = (await t.fhir('GET', next)).json<{ entry: { resource: { id: string } }[]; link: { relation: string }[] }>();
    expect(second.entry.map((entry) => entry.resource.id)).toEqual(['big3']);
    expect(second.link.map((link) => link.relation)).toEqual(['self', 'previous']);
    await t.database.pool.query(`DELETE FROM fhir.resources WHERE id LIKE 'big%'`);
  });

  it('refuses a page whose includes pass 1,000 resources with 400 too-costly (a Group of 1,001 members)', async () => {
    await t.database.pool.query(
      `INSERT INTO fhir.resources (content) SELECT jsonb_build_object('resourceType', 'Patient', 'id', 'member' || n) FROM generate_series(1, 1001) n`,
    );
    const member = Array.from({ length: 1_001 }, (_, index) => ({ entity: { reference: `Patient/member${index + 1}` } }));
    await t.fhir('PUT', '/Group/crowd', { resourceType: 'Group', id: 'crowd', type: 'person', actual: true, member });
    const response = await t.fhir('GET', '/Group?_id=crowd&_include=Group:member');
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0]).toMatchObject({
      code: 'too-costly',
      details: { text: expect.stringMatching(/pass 1,000 resources or 16 MiB: lower _count/) },
    });
    const fewer = await t.fhir('GET', '/Group?_id=crowd&_include=Group:member:Practitioner');
    expect(fewer.statusCode).toBe(200);
  });
});

describe('what answers and logs show', () => {
  it('every answer says nosniff and no-store', async () => {
    for (const path of ['/Patient?name=x', '/Subscription', '/metadata']) {
      const response = await t.fhir('GET', path);
      expect(response.headers).toMatchObject({ 'x-content-type-options': 'nosniff', 'cache-control': 'no-store', 'x-frame-options': 'DENY' });
    }
  });

  it('logs a search by its path, without the query string that can carry patient data', async () => {
    const lines: string[] = [];
    const app = await appWith({ logger: createLogger('debug', { write: (line: string) => lines.push(line) }) });
    try {
      await app.inject({ method: 'GET', url: '/fhir/resources/Patient?name=Jane-Doe-1970&birthdate=1970-01-01', headers: { 'x-api-key': t.apiKey } });
      const log = lines.join('');
      expect(log).toContain('/fhir/resources/Patient');
      expect(log).not.toContain('Jane-Doe');
      expect(log).not.toContain('1970-01-01');
      expect(log).not.toContain(t.apiKey);
    } finally {
      await app.close();
    }
  });
});

describe('rate limit per API key', () => {
  it('answers 429 throttled with Retry-After past the per-minute limit of one key, and leaves other keys alone', async () => {
    const app = await appWith({ rateLimitPerMinute: 3 });
    const { key: other } = await createApiKey(t.database.db, 'another client');
    try {
      const get = (key: string) => app.inject({ method: 'GET', url: '/fhir/resources/metadata', headers: { 'x-api-key': key } });
      for (let request = 0; request < 3; request++) expect((await get(t.apiKey)).statusCode).toBe(200);
      const throttled = await get(t.apiKey);
      expect(throttled.statusCode).toBe(429);
      expect(Number(throttled.headers['retry-after'])).toBeGreaterThan(0);
      expect(throttled.json()).toMatchObject({
        resourceType: 'OperationOutcome',
        issue: [{ code: 'throttled', details: { text: expect.stringMatching(/More than 3 requests in a minute/) } }],
      });
      expect((await get(other)).statusCode).toBe(200);
      // Health checks are not counted: they have no key.
      for (let request = 0; request < 5; request++) expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });
});

describe('injection', () => {
  // Values that would change a jsonpath or SQL statement if they were spliced into its text.
  const hostile = ['") || true || ("', "' OR '1'='1", '$', '@', '\\', '"', "'); DROP TABLE fhir.resources; --", '$.** ? (@ == 1)', 'exists($)', '*'];

  it.each(hostile)('%s as a token, string, reference, uri and :contains value matches nothing it should not', async (value) => {
    await t.fhir('PUT', '/Patient/innocent', { resourceType: 'Patient', id: 'innocent', active: true, name: [{ family: 'Innocent' }], gender: 'female' });
    const encoded = encodeURIComponent(value);
    for (const query of [
      `gender=${encoded}`,
      `name=${encoded}`,
      `name:exact=${encoded}`,
      `name:contains=${encoded}`,
      `general-practitioner=${encoded}`,
      `_profile=${encoded}`,
      `_id=${encoded}`,
      `identifier=${encoded}|${encoded}`,
    ]) {
      const response = await t.fhir('GET', `/Patient?_id=innocent&${query}`);
      // Either refused as malformed, or a search that finds nothing: never the innocent Patient, never a 500.
      expect([200, 400], `${query}: ${response.body}`).toContain(response.statusCode);
      if (response.statusCode === 200) expect(response.json().total, query).toBe(0);
    }
    const { rows } = await t.database.pool.query(`SELECT count(*)::int AS count FROM fhir.resources WHERE resource_type = 'Patient' AND id = 'innocent'`);
    expect(rows[0].count).toBe(1);
  });
});
