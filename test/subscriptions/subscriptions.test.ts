import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createSecretBox } from '../../src/subscriptions/secrets.ts';
import { encryptEndpointCredentials } from '../../src/subscriptions/store.ts';
import { baseUrl, serviceBase, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());
beforeEach(async () => {
  await t.database.pool.query('DELETE FROM webhook.subscriptions');
  await t.database.pool.query('SELECT graphile_worker.complete_jobs(array(SELECT id FROM graphile_worker.jobs))');
});

const tagSystem = `${baseUrl}/fhir/resources/NamingSystem/webhook`;

function subscription(overrides: Record<string, unknown> = {}, channel: Record<string, unknown> = {}) {
  return {
    resourceType: 'Subscription',
    status: 'requested',
    criteria: 'Appointment?status=booked',
    reason: 'Appointment notifications',
    channel: {
      type: 'rest-hook',
      endpoint: 'https://receiver.example.org/hooks',
      payload: 'application/fhir+json',
      header: ['secret: s3cr3t-value', 'Authorization: Bearer abc:def'],
      ...channel,
    },
    contact: [{ system: 'email', value: 'ops@example.org' }],
    ...overrides,
  };
}

const post = (body: unknown) => t.fhir('POST', '/Subscription', body);

function expectRefusal(response: { statusCode: number; json(): unknown }, message: string) {
  expect(response.statusCode).toBe(400);
  const outcome = response.json() as { resourceType: string; issue: { severity: string; code: string; details: { text: string }; expression?: unknown }[] };
  expect(outcome.resourceType).toBe('OperationOutcome');
  expect(outcome.issue[0]).toEqual({ severity: 'error', code: 'exception', details: { text: `ValidationError: ['${message}']` } });
}

describe('POST /Subscription with status requested', () => {
  it('answers 201 with the stored subscription, its identifier tag and the client headers', async () => {
    const response = await post(subscription());
    expect(response.statusCode).toBe(201);
    const created = response.json();
    expect(created).toMatchObject({
      resourceType: 'Subscription',
      status: 'requested',
      criteria: 'Appointment?status=booked',
      reason: 'Appointment notifications',
      channel: {
        type: 'rest-hook',
        endpoint: 'https://receiver.example.org/hooks',
        payload: 'application/fhir+json',
        header: ['secret: s3cr3t-value', 'Authorization: Bearer abc:def'],
      },
      contact: [{ system: 'email', value: 'ops@example.org' }],
      meta: { versionId: '1' },
    });
    expect(created.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(created.meta.lastUpdated).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
    expect(created.meta.tag).toEqual([{ system: tagSystem, code: expect.stringMatching(/^[0-9a-f-]{36}$/) }]);
    expect(response.headers.location).toBe(`${serviceBase}/Subscription/${created.id}`);
  });

  it('enqueues the handshake in the creating transaction', async () => {
    const created = (await post(subscription())).json();
    const { rows } = await t.database.pool.query(
      `SELECT jobs.task_identifier, jobs.key, private.payload
       FROM graphile_worker.jobs JOIN graphile_worker._private_jobs private USING (id)`,
    );
    expect(rows).toEqual([{ task_identifier: 'subscription_handshake', key: `handshake:${created.id}`, payload: { subscriptionId: created.id } }]);
  });

  it('generates a secret when none is sent, stores it encrypted and never shows it', async () => {
    const response = await post(subscription({}, { header: ['X-Tenant: blue'] }));
    const created = response.json();
    expect(created.channel.header).toEqual(['X-Tenant: blue']);
    const { rows } = await t.database.pool.query(`SELECT signing_secret_encrypted, secret_is_generated FROM webhook.subscriptions WHERE id = $1`, [created.id]);
    expect(rows[0].secret_is_generated).toBe(true);
    const secret = createSecretBox(testSecretsKey).open(rows[0].signing_secret_encrypted as Buffer);
    expect(secret.length).toBeGreaterThanOrEqual(40);
    const read = await t.fhir('GET', `/Subscription/${created.id}`);
    const search = await t.fhir('GET', '/Subscription');
    for (const body of [response.body, read.body, search.body]) expect(body).not.toContain(secret);
  });

  it('keeps header values encrypted at rest: the table holds no plaintext', async () => {
    await post(subscription());
    const { rows } = await t.database.pool.query(`SELECT * FROM webhook.subscriptions`);
    const dump = JSON.stringify(rows, (_key, value: unknown) => (value instanceof Buffer ? value.toString('latin1') : value));
    expect(dump).not.toContain('s3cr3t-value');
    expect(dump).not.toContain('Bearer abc');
    const box = createSecretBox(testSecretsKey);
    expect(JSON.parse(box.open(rows[0].headers_encrypted as Buffer))).toEqual(['secret: s3cr3t-value', 'Authorization: Bearer abc:def']);
    expect(box.open(rows[0].signing_secret_encrypted as Buffer)).toBe('s3cr3t-value');
  });

  it('keeps the credentials of an endpoint encrypted at rest, shows the client its whole endpoint, and finds it by url', async () => {
    const endpoint = 'https://bob:pw-in-endpoint@receiver.example.org/hooks?token=token-in-endpoint&tenant=blue';
    const created = (await post(subscription({}, { endpoint }))).json();
    expect(created.channel.endpoint).toBe(endpoint);
    const { rows } = await t.database.pool.query(`SELECT endpoint, endpoint_encrypted FROM webhook.subscriptions WHERE id = $1`, [created.id]);
    expect(rows[0].endpoint).toBe('https://***:***@receiver.example.org/hooks?token=***&tenant=***');
    expect(createSecretBox(testSecretsKey).open(rows[0].endpoint_encrypted as Buffer)).toBe(endpoint);
    expect((await t.fhir('GET', `/Subscription/${created.id}`)).json().resource.channel.endpoint).toBe(endpoint);
    const found = async (url: string) =>
      (await t.fhir('GET', `/Subscription?url=${encodeURIComponent(url)}`)).json().entry?.map((entry: { resource: { id: string } }) => entry.resource.id) ?? [];
    expect(await found(endpoint)).toEqual([created.id]);
    // Another token at the same place, and the endpoint as shown, are other endpoints.
    expect(await found(endpoint.replace('token-in-endpoint', 'other-token'))).toEqual([]);
    expect(await found(rows[0].endpoint as string)).toEqual([]);
  });

  it('keeps an endpoint without credentials as it is, unencrypted', async () => {
    const created = (await post(subscription())).json();
    const { rows } = await t.database.pool.query(`SELECT endpoint, endpoint_encrypted FROM webhook.subscriptions WHERE id = $1`, [created.id]);
    expect(rows[0]).toEqual({ endpoint: 'https://receiver.example.org/hooks', endpoint_encrypted: null });
  });

  it('encrypts, at the next start, the credentials of endpoints stored before migration 0015', async () => {
    const endpoint = 'http://alice:old-password@receiver.example.org/hooks?key=old-key';
    const created = (await post(subscription({}, { endpoint }))).json();
    const plain = (await post(subscription({ criteria: 'Appointment?status=cancelled' }))).json();
    // As such a row was before 0015.
    await t.database.pool.query(`UPDATE webhook.subscriptions SET endpoint = $2, endpoint_encrypted = NULL WHERE id = $1`, [created.id, endpoint]);
    expect(await encryptEndpointCredentials(t.database.db, createSecretBox(testSecretsKey))).toBe(1);
    const { rows } = await t.database.pool.query(
      `SELECT id, endpoint, endpoint_encrypted IS NOT NULL AS encrypted FROM webhook.subscriptions WHERE id = ANY($1) ORDER BY created_at`,
      [[created.id, plain.id]],
    );
    expect(rows).toEqual([
      { id: created.id, endpoint: 'http://***:***@receiver.example.org/hooks?key=***', encrypted: true },
      { id: plain.id, endpoint: 'https://receiver.example.org/hooks', encrypted: false },
    ]);
    expect((await t.fhir('GET', `/Subscription/${created.id}`)).json().resource.channel.endpoint).toBe(endpoint);
    expect(await encryptEndpointCredentials(t.database.db, createSecretBox(testSecretsKey))).toBe(0);
  });

  it('takes a criteria whose _id lists 30 UUIDs: each alternative is bounded, not the list', async () => {
    const criteria = `Patient?_id=${Array.from({ length: 30 }, () => randomUUID()).join(',')}`;
    expect(criteria.length).toBeGreaterThan(1_024);
    const response = await post(subscription({ criteria }));
    expect(response.statusCode, response.body).toBe(201);
    expect(response.json().criteria).toBe(criteria);
  });

  it('lets exactly one of 20 concurrent creates of the same criteria win', async () => {
    const responses = await Promise.all(Array.from({ length: 20 }, () => post(subscription({ criteria: 'Patient?active=true' }))));
    const statuses = responses.map((response) => response.statusCode);
    expect(statuses.filter((status) => status === 201)).toHaveLength(1);
    expect(statuses.filter((status) => status === 400)).toHaveLength(19);
    for (const response of responses.filter((candidate) => candidate.statusCode === 400)) {
      expect(response.json().issue[0].details.text).toContain('subscriptions_one_live_per_key_and_criteria');
    }
    const { rows } = await t.database.pool.query(`SELECT count(*)::int AS n FROM graphile_worker.jobs`);
    expect(rows[0].n).toBe(1);
  });
});

describe('refusals', () => {
  const cases: [string, unknown, string][] = [
    ['a channel other than rest-hook', subscription({}, { type: 'email' }), 'Only channel=rest-hook subscriptions are supported'],
    ['creation with another status', subscription({ status: 'active' }), 'Subscriptions must start with status=requested'],
    [
      'a criteria type that is not a resource',
      subscription({ criteria: 'Appointement?status=booked' }),
      'criteria=Appointement?status=booked is not a valid FHIR resource',
    ],
    ['a contact system other than email', subscription({ contact: [{ system: 'phone', value: '+3312345678' }] }), 'Only contact system=email are supported.'],
    ['a bad e-mail', subscription({ contact: [{ system: 'email', value: 'not-an-email' }] }), 'The contact email "not-an-email" is invalid.'],
    ['no resourceType', { ...subscription(), resourceType: undefined }, 'resourceType is required'],
    ['no status', subscription({ status: undefined }), 'status is required'],
    ['no criteria', subscription({ criteria: undefined }), 'criteria is required'],
    ['no reason', subscription({ reason: undefined }), 'reason is required'],
    ['no channel', subscription({ channel: undefined }), 'channel is required'],
    ['no channel.type', subscription({}, { type: undefined }), 'channel.type is required'],
    ['no channel.endpoint', subscription({}, { endpoint: undefined }), 'channel.endpoint is required'],
    ['a relative endpoint', subscription({}, { endpoint: '/hooks' }), 'channel.endpoint must be an absolute http or https URL'],
    ['an ftp endpoint', subscription({}, { endpoint: 'ftp://example.org/x' }), 'channel.endpoint must be an absolute http or https URL'],
    // A refusal names the item, never its text: an item without a colon may be a whole secret.
    ['a header without a colon', subscription({}, { header: ['Authorization Bearer x'] }), 'channel.header item 1 is not of the form "Name: value"'],
    ['a header with an empty value', subscription({}, { header: ['X-Tenant: blue', 'X-Empty:'] }), 'channel.header item 2 is not of the form "Name: value"'],
    [
      'a Content-Type header',
      subscription({}, { header: ['Content-Type: text/plain'] }),
      'channel.header item 1 (Content-Type) is set by the service, and a client value would break signature checks',
    ],
    [
      'an X-Hub-Signature header',
      subscription({}, { header: ['x-hub-signature: sha256=00'] }),
      'channel.header item 1 (x-hub-signature) is set by the service, and a client value would break signature checks',
    ],
    ...['Content-Length: 5', 'Transfer-Encoding: chunked', 'Host: internal.example', 'Connection: close', 'Upgrade: h2c'].map(
      (item): [string, unknown, string] => [
        `a ${item.split(':')[0]} header`,
        subscription({}, { header: [item] }),
        `channel.header item 1 (${item.split(':')[0]}) is about the connection, which the service's HTTP client manages`,
      ],
    ),
    [
      'a header value beyond Latin-1',
      subscription({}, { header: ['X-Name: Zoë ✓'] }),
      'channel.header item 1 (X-Name) has a value HTTP cannot carry (control characters, or characters beyond Latin-1)',
    ],
    [
      'a header value with a control character',
      subscription({}, { header: ['X-Name: a\rb'] }),
      'channel.header item 1 (X-Name) has a value HTTP cannot carry (control characters, or characters beyond Latin-1)',
    ],
    ['10,000 headers', subscription({}, { header: Array.from({ length: 10_000 }, (_, index) => `X-H${index}: v`) }), 'channel.header has more than 50 items'],
    ['a 1 MB header', subscription({}, { header: [`X-Big: ${'v'.repeat(1_000_000)}`] }), 'channel.header item 1 is longer than 4096 characters'],
    ['two secret headers', subscription({}, { header: ['secret: a', 'Secret: b'] }), 'channel.header has more than one secret header'],
    ['another payload', subscription({}, { payload: 'application/xml' }), 'channel.payload must be application/fhir+json'],
    [
      'an unknown search parameter in the criteria',
      subscription({ criteria: 'Appointment?colour=blue' }),
      "criteria=Appointment?colour=blue: Unknown search parameter 'colour' for Appointment",
    ],
    [
      'an unsupported search parameter in the criteria',
      subscription({ criteria: 'Patient?deceased=true' }),
      "criteria=Patient?deceased=true: search parameter deceased is not supported: its FHIRPath expression is beyond what compiles to SQL (cannot read '.exists() and Patient.deceased != false')",
    ],
    [
      'a malformed date in the criteria',
      subscription({ criteria: 'Appointment?date=soon' }),
      "criteria=Appointment?date=soon: 'soon' is not a date for 'date' (YYYY, YYYY-MM, YYYY-MM-DD or YYYY-MM-DDThh:mm[:ss[.f]][Z|±hh:mm])",
    ],
    [
      'a criteria alternative over 1,024 characters',
      subscription({ criteria: `Patient?name=smith,${'a'.repeat(1_025)}` }),
      `criteria=Patient?name=smith,${'a'.repeat(1_025)}: Search parameter 'name': its alternative 2 of 2 has 1,025 characters; the limit is 1,024 for each comma-separated alternative`,
    ],
    [
      'a criteria parameter with 101 alternatives',
      subscription({ criteria: `Patient?_id=${Array.from({ length: 101 }, (_, index) => `p${index}`).join(',')}` }),
      `criteria=Patient?_id=${Array.from({ length: 101 }, (_, index) => `p${index}`).join(',')}: Search parameter '_id' has 101 comma-separated alternatives; the limit is 100`,
    ],
    [
      'switching off what is not live',
      { resourceType: 'Subscription', status: 'off', criteria: 'Encounter?status=planned' },
      'Not found webhook active or requested for criteria=Encounter?status=planned',
    ],
  ];

  it.each(cases)('%s', async (_name, body, message) => {
    expectRefusal(await post(body), message);
    const { rows } = await t.database.pool.query(`SELECT count(*)::int AS n FROM webhook.subscriptions`);
    expect(rows[0].n).toBe(0);
  });

  it('malformed JSON', async () => {
    const response = await t.fhir('POST', '/Subscription', '{"resourceType": "Subscription",');
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0]).toMatchObject({ code: 'exception', details: { text: expect.stringMatching(/^ValidationError: \['.*JSON.*'\]$/) } });
  });

  it('a second live subscription for the same criteria', async () => {
    expect((await post(subscription())).statusCode).toBe(201);
    expectRefusal(
      await post(subscription()),
      'This API key already has a live (requested or active) subscription for criteria=Appointment?status=booked (constraint subscriptions_one_live_per_key_and_criteria): switch it off first',
    );
  });

  it.each(['PUT', 'PATCH', 'DELETE'] as const)('%s on a subscription is 405', async (method) => {
    const created = (await post(subscription())).json();
    const response = await t.fhir(method, `/Subscription/${created.id}`, subscription({ id: created.id }));
    expect(response.statusCode).toBe(405);
    expect(response.json().issue[0].details.text).toMatch(/switch it off .* and create a new one/);
  });

  it('Subscription is not reachable through the generic resource routes', async () => {
    const created = (await post(subscription())).json();
    expect((await t.fhir('GET', `/Subscription/${created.id}/_history`)).statusCode).toBe(405);
    expect((await t.fhir('POST', '/Subscription/_search', 'status=active', { 'content-type': 'application/x-www-form-urlencoded' })).statusCode).toBe(405);
  });
});

describe('switching off', () => {
  it('closes the live subscription with the identical criteria string, sets end, and frees the criteria', async () => {
    const created = (await post(subscription({ criteria: 'Appointment?status=booked&_include=Appointment:patient' }))).json();
    expectRefusal(
      await post({ resourceType: 'Subscription', status: 'off', criteria: 'Appointment?status=booked' }),
      'Not found webhook active or requested for criteria=Appointment?status=booked',
    );
    const response = await post({ resourceType: 'Subscription', status: 'off', criteria: 'Appointment?status=booked&_include=Appointment:patient' });
    expect(response.statusCode).toBe(200);
    const off = response.json();
    expect(off).toMatchObject({ id: created.id, status: 'off', reason: '-', meta: { versionId: '2' } });
    expect(off.end).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
    expect(off.end >= created.meta.lastUpdated).toBe(true);
    expect((await post(subscription({ criteria: 'Appointment?status=booked&_include=Appointment:patient' }))).statusCode).toBe(201);
  });

  it('switches off a subscription in error when none is live for the criteria', async () => {
    const created = (await post(subscription({ criteria: 'Patient?gender=other' }))).json();
    await t.database.pool.query(`UPDATE webhook.subscriptions SET status = 'error', error = 'HTTP 500' WHERE id = $1`, [created.id]);
    const response = await post({ resourceType: 'Subscription', status: 'off', criteria: 'Patient?gender=other' });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toMatchObject({ id: created.id, status: 'off' });
  });
});

describe('reads and searches', () => {
  it('reads one subscription in the spec envelope, with reason shown as "-"', async () => {
    const created = (await post(subscription())).json();
    const response = await t.fhir('GET', `/Subscription/${created.id}`);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ fullUrl: `${serviceBase}/Subscription/${created.id}`, resource: { ...created, reason: '-' }, search: { mode: 'match' } });
  });

  it('answers 404 for an unknown id', async () => {
    for (const id of ['00000000-0000-4000-8000-000000000000', 'not-a-uuid']) {
      const response = await t.fhir('GET', `/Subscription/${id}`);
      expect(response.statusCode).toBe(404);
      expect(response.json().issue[0].code).toBe('not-found');
    }
  });

  it('filters by _tag, criteria, url and status, truthfully', async () => {
    const first = (await post(subscription({ criteria: 'Patient?active=true' }))).json();
    const second = (await post(subscription({ criteria: 'Encounter' }, { endpoint: 'https://other.example.org/in' }))).json();
    await post({ resourceType: 'Subscription', status: 'off', criteria: 'Encounter' });
    await t.database.pool.query(`UPDATE webhook.subscriptions SET status = 'active' WHERE id = $1`, [first.id]);
    const ids = async (query: string) => {
      const response = await t.fhir('GET', `/Subscription${query}`);
      expect(response.statusCode).toBe(200);
      const bundle = response.json();
      expect(bundle).toMatchObject({ resourceType: 'Bundle', type: 'searchset', link: [] });
      for (const entry of bundle.entry) expect(entry).toMatchObject({ fullUrl: `${serviceBase}/Subscription/${entry.resource.id}`, search: { mode: 'match' } });
      return bundle.entry.map((entry: { resource: { id: string; reason: string } }) => entry.resource.id);
    };
    expect(await ids('')).toEqual([first.id, second.id]);
    expect(await ids(`?_tag=${encodeURIComponent(`${tagSystem}|${first.meta.tag[0].code}`)}`)).toEqual([first.id]);
    expect(await ids(`?_tag=${encodeURIComponent(`http://elsewhere/NamingSystem/webhook|${first.meta.tag[0].code}`)}`)).toEqual([]);
    expect(await ids(`?criteria=${encodeURIComponent('Patient?active=true')}`)).toEqual([first.id]);
    expect(await ids(`?url=${encodeURIComponent('https://other.example.org/in')}`)).toEqual([second.id]);
    expect(await ids('?status=active')).toEqual([first.id]);
    expect(await ids('?status=off')).toEqual([second.id]);
    expect(await ids('?status=requested')).toEqual([]);
    expectRefusal(
      await t.fhir('GET', '/Subscription?colour=red'),
      "Unknown search parameter 'colour' for Subscription (supported: _count, _page_token, _tag, criteria, url, status, custom-channel)",
    );
  });

  it('pages with _page_token through every subscription exactly once while new ones are created', async () => {
    const existing: string[] = [];
    for (let index = 0; index < 25; index++) existing.push((await post(subscription({ criteria: `Patient?_id=p${index}` }))).json().id);
    const seen: string[] = [];
    let url: string | undefined = '/Subscription?_count=4';
    let created = 0;
    while (url) {
      const bundle: { entry: { resource: { id: string } }[]; link: { relation: string; url: string }[] } = (await t.fhir('GET', url)).json();
      seen.push(...bundle.entry.map((entry) => entry.resource.id));
      await post(subscription({ criteria: `Encounter?_id=new${created++}` }));
      url = bundle.link.find((link) => link.relation === 'next')?.url.replace(serviceBase, '');
    }
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.slice(0, 25)).toEqual(existing);
    expect(seen.length).toBeGreaterThanOrEqual(25);
  });
});

describe('Subscriptions in a transaction Bundle', () => {
  it('replaces a subscription without a gap: off, then requested, in array order, in one transaction', async () => {
    const old = (await post(subscription())).json();
    const response = await t.fhir('POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        {
          fullUrl: 'urn:uuid:61ebe359-bfdc-4613-8bf2-c5e300945f0a',
          request: { url: 'Subscription', method: 'POST' },
          resource: { resourceType: 'Subscription', status: 'off', criteria: 'Appointment?status=booked' },
        },
        {
          fullUrl: 'urn:uuid:61ebe359-bfdc-4613-8bf2-c5e300945f0b',
          request: { url: 'Subscription', method: 'POST' },
          resource: subscription({}, { endpoint: 'https://receiver.example.org/v2' }),
        },
      ],
    });
    expect(response.statusCode).toBe(200);
    const bundle = response.json();
    expect(bundle.entry.map((entry: { response: { status: string } }) => entry.response.status)).toEqual(['200 OK', '201 Created']);
    expect(bundle.entry[0].resource).toMatchObject({ id: old.id, status: 'off' });
    expect(bundle.entry[1].resource).toMatchObject({ status: 'requested', channel: { endpoint: 'https://receiver.example.org/v2' } });
    expect(bundle.entry[1].response.location).toBe(`${serviceBase}/Subscription/${bundle.entry[1].resource.id}`);
  });

  it('rolls the subscription and its handshake job back when a later entry fails', async () => {
    const response = await t.fhir('POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [{ request: { url: 'Subscription', method: 'POST' }, resource: subscription() }, { request: { url: 'Patient/missing', method: 'DELETE' } }],
    });
    expect(response.statusCode).toBe(404);
    const { rows } = await t.database.pool.query(
      `SELECT (SELECT count(*)::int FROM webhook.subscriptions) AS subscriptions, (SELECT count(*)::int FROM graphile_worker.jobs) AS jobs`,
    );
    expect(rows[0]).toEqual({ subscriptions: 0, jobs: 0 });
  });

  it('refuses an invalid subscription entry with the spec message, naming the entry', async () => {
    const response = await t.fhir('POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [{ request: { url: 'Subscription', method: 'POST' }, resource: subscription({}, { type: 'websocket' }) }],
    });
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0]).toMatchObject({
      code: 'exception',
      details: { text: "Bundle.entry[0]: ValidationError: ['Only channel=rest-hook subscriptions are supported']" },
    });
  });
});
