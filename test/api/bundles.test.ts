import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serviceBase, startTestApp, type TestApp } from '../support/app.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

async function count(type: string): Promise<number> {
  const { rows } = await t.database.pool.query('SELECT count(*)::int AS n FROM fhir.resources WHERE resource_type = $1', [type]);
  return rows[0].n;
}

describe('transaction Bundles', () => {
  it('runs the entries in order in one transaction and resolves urn:uuid references', async () => {
    const patientUrn = 'urn:uuid:5f1e4d8a-0c1b-4a7e-9a53-2d3b8c1f6e01';
    const response = await t.fhir('POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        {
          fullUrl: 'urn:uuid:7a2c9e10-3b4d-4f5e-8a6b-9c0d1e2f3a4b',
          resource: {
            resourceType: 'Appointment',
            status: 'booked',
            start: '2026-03-02T09:00:00Z',
            end: '2026-03-02T09:30:00Z',
            participant: [{ actor: { reference: patientUrn }, status: 'accepted' }],
          },
          request: { method: 'POST', url: 'Appointment' },
        },
        { fullUrl: patientUrn, resource: { resourceType: 'Patient', active: true }, request: { method: 'POST', url: 'Patient' } },
        { resource: { resourceType: 'Practitioner', id: 'tx-doc' }, request: { method: 'PUT', url: 'Practitioner/tx-doc' } },
      ],
    });
    expect(response.statusCode).toBe(200);
    const bundle = response.json();
    expect(bundle).toMatchObject({ resourceType: 'Bundle', type: 'transaction-response' });
    expect(bundle.entry.map((entry: { response: { status: string } }) => entry.response.status)).toEqual(['201 Created', '201 Created', '201 Created']);

    const patientId = bundle.entry[1].resource.id;
    const appointment = bundle.entry[0].resource;
    expect(appointment.participant[0].actor.reference).toBe(`Patient/${patientId}`);
    expect(bundle.entry[1].response).toMatchObject({ location: `${serviceBase}/Patient/${patientId}/_history/1`, etag: 'W/"1"' });
    const stored = (await t.fhir('GET', `/Appointment/${appointment.id}`)).json();
    expect(stored.participant[0].actor.reference).toBe(`Patient/${patientId}`);
  });

  it('rolls every entry back when one fails, and names the failing entry', async () => {
    const before = await count('Observation');
    const response = await t.fhir('POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        { resource: { resourceType: 'Observation', status: 'final', code: { text: 'pulse' } }, request: { method: 'POST', url: 'Observation' } },
        {
          resource: { resourceType: 'Observation', id: 'tx-obs', status: 'final', code: { text: 'pulse' } },
          request: { method: 'PUT', url: 'Observation/tx-obs' },
        },
        { request: { method: 'DELETE', url: 'Observation/never-existed' } },
      ],
    });
    expect(response.statusCode).toBe(404);
    expect(response.json().issue[0]).toMatchObject({ code: 'not-found', details: { text: 'Bundle.entry[2]: Observation/never-existed is not known' } });
    expect(await count('Observation')).toBe(before);
    const { rows } = await t.database.pool.query(`SELECT count(*)::int AS n FROM fhir.resource_history WHERE id = 'tx-obs'`);
    expect(rows[0].n).toBe(0);
  });

  it('refuses an entry without request, with the entry named', async () => {
    const response = await t.fhir('POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [{ resource: { resourceType: 'Patient' } }],
    });
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0].details.text).toBe('Bundle.entry[0]: request is required');
  });

  it('answers a transaction or batch without entries with a response without entries (FHIR JSON has no empty arrays), at the base and at /Bundle', async () => {
    for (const [path, type] of [
      ['/', 'transaction'],
      ['/Bundle', 'batch'],
    ] as const) {
      const response = await t.fhir('POST', path, { resourceType: 'Bundle', type });
      expect(response.statusCode, response.body).toBe(200);
      expect(response.json()).toEqual({ resourceType: 'Bundle', id: expect.any(String), type: `${type}-response` });
    }
  });

  it('refuses entry that is not an array', async () => {
    const response = await t.fhir('POST', '/Bundle', { resourceType: 'Bundle', type: 'transaction', entry: {} });
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0].details.text).toBe('Bundle.entry must be an array');
  });

  it('updates and deletes in array order: a later entry sees an earlier one', async () => {
    await t.fhir('PUT', '/Patient/ordered', { resourceType: 'Patient', id: 'ordered' });
    const response = await t.fhir('POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        { request: { method: 'DELETE', url: 'Patient/ordered' } },
        { resource: { resourceType: 'Patient', id: 'ordered', active: true }, request: { method: 'PUT', url: 'Patient/ordered' } },
        { request: { method: 'GET', url: 'Patient/ordered' } },
      ],
    });
    expect(response.statusCode).toBe(200);
    const entries = response.json().entry;
    expect(entries[0].response).toMatchObject({ status: '204 No Content', etag: 'W/"2"' });
    expect(entries[1].response).toMatchObject({ status: '201 Created', etag: 'W/"3"' });
    expect(entries[2].resource).toMatchObject({ active: true, meta: { versionId: '3' } });
  });
});

describe('batch Bundles', () => {
  it('runs each entry on its own: failures are reported per entry and the rest commit', async () => {
    const response = await t.fhir('POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [
        { resource: { resourceType: 'Patient', id: 'batch-1' }, request: { method: 'PUT', url: 'Patient/batch-1' } },
        { resource: { resourceType: 'Observation' }, request: { method: 'POST', url: 'Patient' } },
        { request: { method: 'GET', url: 'Patient/no-such-patient' } },
        { resource: { resourceType: 'Patient' }, request: { method: 'POST', url: 'Patient' } },
        { resource: { resourceType: 'Patient', name: [{ text: 'nul \u0000' }] }, request: { method: 'POST', url: 'Patient' } },
      ],
    });
    expect(response.statusCode).toBe(200);
    const bundle = response.json();
    expect(bundle.type).toBe('batch-response');
    expect(bundle.entry.map((entry: { response: { status: string } }) => entry.response.status)).toEqual([
      '201 Created',
      '400 Bad Request',
      '404 Not Found',
      '201 Created',
      '400 Bad Request',
    ]);
    expect(bundle.entry[1].response.outcome.issue[0].details.text).toMatch(/^Bundle.entry\[1\]: The body's resourceType/);
    expect((await t.fhir('GET', '/Patient/batch-1')).statusCode).toBe(200);
    expect((await t.fhir('GET', `/Patient/${bundle.entry[3].resource.id}`)).statusCode).toBe(200);
  });
});

describe('other Bundles', () => {
  it('stores a document Bundle as a Bundle resource', async () => {
    const response = await t.fhir('POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'document',
      identifier: { system: 'urn:ietf:rfc:3986', value: 'urn:uuid:3a9c7e21-5b8d-4f60-a1c2-7d4e9f0b1a23' },
      timestamp: '2026-03-02T10:00:00Z',
      entry: [
        {
          fullUrl: 'urn:uuid:0d6f3a52-1c1e-4b1a-9d4e-1f2a3b4c5d6e',
          resource: {
            resourceType: 'Composition',
            status: 'final',
            type: { coding: [{ system: 'http://loinc.org', code: '11503-0', display: 'Medical records' }] },
            date: '2026-03-02T10:00:00Z',
            author: [{ display: 'Dr. Ada Example' }],
            title: 'Visit summary',
          },
        },
      ],
    });
    expect(response.statusCode).toBe(201);
    const stored = (await t.fhir('GET', `/Bundle/${response.json().id}`)).json();
    expect(stored).toMatchObject({ resourceType: 'Bundle', type: 'document', meta: { versionId: '1' } });
    expect(await count('Composition')).toBe(0);
  });
});
