import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serviceBase, startTestApp, type TestApp } from '../support/app.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

const instantPattern = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
/** Encounter.class (required in R4): an ambulatory visit. */
const ambulatory = { system: 'http://terminology.hl7.org/CodeSystem/v3-ActCode', code: 'AMB' };

describe('FHIR RESTful interactions', () => {
  it('creates with a server-assigned UUID and answers 201 with Location, ETag and Last-Modified', async () => {
    const response = await t.fhir('POST', '/Patient', { resourceType: 'Patient', id: 'ignored', active: true });
    expect(response.statusCode).toBe(201);
    expect(response.headers['content-type']).toBe('application/fhir+json; charset=utf-8');
    const patient = response.json();
    expect(patient.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(patient).toMatchObject({ resourceType: 'Patient', active: true, meta: { versionId: '1' } });
    expect(patient.meta.lastUpdated).toMatch(instantPattern);
    expect(response.headers.location).toBe(`${serviceBase}/Patient/${patient.id}/_history/1`);
    expect(response.headers.etag).toBe('W/"1"');
    expect(response.headers['last-modified']).toBe(new Date(patient.meta.lastUpdated).toUTCString());
  });

  it('reads the bare resource with its ETag', async () => {
    const created = (await t.fhir('POST', '/Observation', { resourceType: 'Observation', status: 'final', code: { text: 'body weight' } })).json();
    const response = await t.fhir('GET', `/Observation/${created.id}`);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual(created);
    expect(response.headers.etag).toBe('W/"1"');
  });

  it('accepts application/json as well as application/fhir+json', async () => {
    const response = await t.app.inject({
      method: 'POST',
      url: '/fhir/resources/Patient',
      headers: { 'x-api-key': t.apiKey, 'content-type': 'application/json' },
      payload: { resourceType: 'Patient' },
    });
    expect(response.statusCode).toBe(201);
  });

  it('updates to a new version and keeps the old one in history', async () => {
    const created = (await t.fhir('POST', '/Patient', { resourceType: 'Patient', gender: 'female' })).json();
    const response = await t.fhir('PUT', `/Patient/${created.id}`, { resourceType: 'Patient', id: created.id, gender: 'male' });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toMatchObject({ gender: 'male', meta: { versionId: '2' } });
    expect(response.json().meta.lastUpdated > created.meta.lastUpdated).toBe(true);
    const first = await t.fhir('GET', `/Patient/${created.id}/_history/1`);
    expect(first.json()).toEqual(created);
  });

  it('creates with the client id on PUT to an unknown id (update as create)', async () => {
    const response = await t.fhir('PUT', '/Practitioner/dr-who', { resourceType: 'Practitioner', id: 'dr-who' });
    expect(response.statusCode).toBe(201);
    expect(response.json()).toMatchObject({ id: 'dr-who', meta: { versionId: '1' } });
    expect(response.headers.location).toBe(`${serviceBase}/Practitioner/dr-who/_history/1`);
  });

  it('honours If-Match on update and delete', async () => {
    const created = (await t.fhir('POST', '/Patient', { resourceType: 'Patient' })).json();
    const stale = await t.fhir('PUT', `/Patient/${created.id}`, { resourceType: 'Patient', id: created.id }, { 'if-match': 'W/"7"' });
    expect(stale.statusCode).toBe(412);
    expect(stale.json().issue[0]).toMatchObject({ code: 'conflict', details: { text: expect.stringContaining('current version is 1') } });

    const fresh = await t.fhir('PUT', `/Patient/${created.id}`, { resourceType: 'Patient', id: created.id, active: false }, { 'if-match': 'W/"1"' });
    expect(fresh.statusCode).toBe(200);
    expect(fresh.headers.etag).toBe('W/"2"');

    expect((await t.fhir('DELETE', `/Patient/${created.id}`, undefined, { 'if-match': 'W/"1"' })).statusCode).toBe(412);
    expect((await t.fhir('DELETE', `/Patient/${created.id}`, undefined, { 'if-match': 'W/"2"' })).statusCode).toBe(204);
  });

  it('deletes: the read answers 410, history shows the deletion, a re-creation continues the versions', async () => {
    const created = (await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'planned', class: ambulatory })).json();
    const deleted = await t.fhir('DELETE', `/Encounter/${created.id}`);
    expect(deleted.statusCode).toBe(204);
    expect(deleted.headers.etag).toBe('W/"2"');

    const read = await t.fhir('GET', `/Encounter/${created.id}`);
    expect(read.statusCode).toBe(410);
    expect(read.json().issue[0].code).toBe('deleted');
    expect((await t.fhir('DELETE', `/Encounter/${created.id}`)).statusCode).toBe(204);
    expect((await t.fhir('GET', `/Encounter/${created.id}/_history/2`)).statusCode).toBe(410);

    const recreated = await t.fhir('PUT', `/Encounter/${created.id}`, { resourceType: 'Encounter', id: created.id, status: 'arrived', class: ambulatory });
    expect(recreated.statusCode).toBe(201);
    expect(recreated.json().meta.versionId).toBe('3');

    const history = (await t.fhir('GET', `/Encounter/${created.id}/_history`)).json();
    expect(history).toMatchObject({ resourceType: 'Bundle', type: 'history', total: 3 });
    expect(history.entry.map((entry: { request: { method: string } }) => entry.request.method)).toEqual(['POST', 'DELETE', 'POST']);
    expect(history.entry[1].resource).toBeUndefined();
    expect(history.entry[1].response).toMatchObject({ status: '204 No Content', etag: 'W/"2"' });
    expect(history.entry[2].resource).toEqual(created);
  });

  it('answers 404 for unknown resources and versions', async () => {
    expect((await t.fhir('GET', '/Patient/nobody')).statusCode).toBe(404);
    expect((await t.fhir('GET', '/Patient/nobody/_history')).statusCode).toBe(404);
    expect((await t.fhir('DELETE', '/Patient/nobody')).statusCode).toBe(404);
    const created = (await t.fhir('POST', '/Patient', { resourceType: 'Patient' })).json();
    const missing = await t.fhir('GET', `/Patient/${created.id}/_history/9`);
    expect(missing.statusCode).toBe(404);
    expect(missing.json().resourceType).toBe('OperationOutcome');
  });

  it('serves a CapabilityStatement listing every R4 resource type', async () => {
    const response = await t.fhir('GET', '/metadata');
    expect(response.statusCode).toBe(200);
    const statement = response.json();
    expect(statement).toMatchObject({ resourceType: 'CapabilityStatement', fhirVersion: '4.0.1', kind: 'instance' });
    const types = statement.rest[0].resource.map((resource: { type: string }) => resource.type);
    // R4 4.0.1's resource types, and only those (not R4B's SubscriptionStatus).
    expect(types).toHaveLength(146);
    expect(types).not.toContain('SubscriptionStatus');
    expect(types).toEqual(expect.arrayContaining(['Appointment', 'Patient', 'Subscription', 'Bundle']));
    expect(statement.rest[0].interaction).toEqual([{ code: 'transaction' }, { code: 'batch' }, { code: 'history-system' }]);
    const byType = (type: string) => statement.rest[0].resource.find((resource: { type: string }) => resource.type === type);
    expect(byType('Appointment').interaction).toContainEqual({ code: 'search-type' });
    expect(byType('Appointment').searchParam).toContainEqual({ name: 'status', type: 'token', documentation: ':missing, :not, :text' });
    expect(byType('Appointment').searchParam).toContainEqual(
      expect.objectContaining({ name: 'actor', type: 'reference', documentation: expect.stringMatching(/chains one level/) }),
    );
    expect(byType('Observation').searchParam).toContainEqual({
      name: 'component-code-value-quantity',
      type: 'composite',
      documentation: 'parts separated by $: component-code$component-value-quantity',
    });
    expect(byType('Appointment').searchInclude).toEqual(expect.arrayContaining(['Appointment:patient', 'Appointment:*', '*']));
    expect(statement.rest[0].searchParam.map((parameter: { name: string }) => parameter.name)).toEqual(['_has', '_summary', '_elements']);
    expect(byType('Patient').searchRevInclude).toContain('Encounter:subject');
    expect(byType('Patient').searchParam.map((parameter: { name: string }) => parameter.name)).not.toContain('deceased');
    expect(byType('Subscription').interaction).toEqual([{ code: 'create' }, { code: 'read' }, { code: 'search-type' }]);
    // Every Subscription operation, the service's own with canonical URLs under its base.
    expect(byType('Subscription').operation.map((operation: { name: string }) => operation.name)).toEqual([
      'status',
      'events',
      'get-ws-binding-token',
      'resend',
      'reactivate',
      'rotate-secret',
    ]);
    for (const name of ['resend', 'reactivate', 'rotate-secret']) {
      expect(byType('Subscription').operation).toContainEqual({ name, definition: `${serviceBase}/OperationDefinition/Subscription-${name}` });
    }
  });
});
