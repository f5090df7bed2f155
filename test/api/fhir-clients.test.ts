import { readFileSync } from 'node:fs';
import { Client, type PaginationParams } from 'fhir-kit-client';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { addTopics } from '../../src/topics/store.ts';
import { startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import type { Json } from '../support/backport-conformance.ts';
import { startReceiver, waitFor, type Receiver } from '../support/receiver.ts';
import { subscribe, untilStatus } from '../support/subscriptions.ts';

/**
 * The API driven by a FHIR client nobody here wrote (fhir-kit-client), as
 * an integration would drive it (issue 25): transactions and batches at the
 * base, operations by GET and POST, conditional create, update and delete,
 * JSON Patch, history at every level, paging both ways. Each write of these
 * notifies a subscription as any write does. (Every answer is also checked
 * against the R4 definitions: test/support/validate-answers.ts.)
 */

let t: TestApp;
let client: Client;
let workers: Workers;
let receiver: Receiver;
let subscriptionId: string;

beforeAll(async () => {
  t = await startTestApp({ listen: true });
  client = new Client({ baseUrl: t.serviceBase, customHeaders: { 'x-api-key': t.apiKey } });
  workers = await startWorkers(
    loadConfig({ BASE_URL: t.baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_RETRY_DELAYS_MS: '100' }),
    t.database,
    testSecretsKey,
    pino({ level: 'silent' }),
  );
  receiver = await startReceiver();
  subscriptionId = (await subscribe(t, 'Patient?family=Kit', receiver.url)).id;
  await untilStatus(t, subscriptionId, 'active');
});
afterAll(async () => {
  await workers.stop();
  await receiver.close();
  await t.close();
});

/** A Bundle as fhir-kit-client's nextPage and prevPage take it. */
const pageOf = (bundle: Json) => ({ bundle: bundle as PaginationParams['bundle'] });

/** What a rejected fhir-kit-client call carried: the HTTP status and the OperationOutcome. */
async function refusal(call: Promise<unknown>): Promise<{ status: number; text: string }> {
  const error = (await call.then(
    () => expect.fail('the call succeeded'),
    (rejected: unknown) => rejected,
  )) as { response?: { status: number; data: Json } };
  expect(error.response, 'the call failed without an HTTP answer').toBeDefined();
  return { status: error.response!.status, text: error.response!.data.issue?.[0]?.details?.text ?? '' };
}

const patient = (identifier: string, given = 'Ada') => ({
  resourceType: 'Patient',
  identifier: [{ system: 'http://hospital.example/mrn', value: identifier }],
  name: [{ family: 'Kit', given: [given] }],
});

/** The versions of Patient `id` the subscriber was sent, in order. */
const notifiedVersions = (id: string) =>
  receiver.calls
    .filter((call) => call.json.resourceType === 'Patient' && call.json.id === id)
    .map((call) => (call.json.meta as { versionId: string }).versionId);

/**
 * Waits until the subscriber was sent version `latest` of Patient `id`, then
 * requires what it was sent in order, ending with it. An older version still
 * unsent when a newer one is written is set aside, never sent after it
 * (docs/delivery.md, "Order per resource"), so a subscriber may not get every
 * version; one sent twice is allowed (delivery is at least once). A timeout
 * says what was sent.
 */
async function untilNotified(id: string, latest: number): Promise<void> {
  await waitFor(() => (notifiedVersions(id).includes(String(latest)) ? true : undefined), 15_000, `version ${latest}`).catch((error: Error) => {
    throw new Error(`${error.message} of Patient/${id}; sent: [${notifiedVersions(id).join()}]`);
  });
  const sent = [...new Set(notifiedVersions(id))].map(Number);
  expect(sent, `versions sent of Patient/${id}`).toEqual([...sent].sort((a, b) => a - b));
  expect(sent.at(-1)).toBe(latest);
}

describe('fhir-kit-client against the service', () => {
  it('transaction() and batch() at the base: one database transaction, urn references rewritten; a batch entry fails alone', async () => {
    const transaction = (await client.transaction({
      body: {
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [
          { fullUrl: 'urn:uuid:0b7e0c36-3f0a-4c8f-9a56-0d6f1f2b8a10', resource: patient('TX-1'), request: { method: 'POST', url: 'Patient' } },
          {
            resource: {
              resourceType: 'Observation',
              status: 'final',
              code: { text: 'weight' },
              subject: { reference: 'urn:uuid:0b7e0c36-3f0a-4c8f-9a56-0d6f1f2b8a10' },
            },
            request: { method: 'POST', url: 'Observation' },
          },
        ],
      },
    })) as Json;
    expect(transaction.type).toBe('transaction-response');
    expect(transaction.entry.map((entry: Json) => entry.response.status)).toEqual(['201 Created', '201 Created']);
    const patientId = transaction.entry[0].resource.id as string;
    expect(transaction.entry[1].resource.subject.reference).toBe(`Patient/${patientId}`);

    const batch = (await client.batch({
      body: {
        resourceType: 'Bundle',
        type: 'batch',
        entry: [{ request: { method: 'GET', url: `Patient/${patientId}` } }, { request: { method: 'GET', url: 'Patient/never-was' } }],
      },
    })) as Json;
    expect(batch.type).toBe('batch-response');
    expect(batch.entry.map((entry: Json) => entry.response.status)).toEqual(['200 OK', '404 Not Found']);

    // A transaction whose last entry fails writes nothing.
    const failed = await refusal(
      client.transaction({
        body: {
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [{ resource: patient('TX-2'), request: { method: 'POST', url: 'Patient' } }, { request: { method: 'DELETE', url: 'Patient/never-was' } }],
        },
      }),
    );
    expect(failed.status).toBe(404);
    expect(((await client.search({ resourceType: 'Patient', searchParams: { identifier: 'TX-2' } })) as Json).total).toBe(0);
  });

  it('conditional entries and PATCH in a transaction: ifNoneExist resolves its urn to the match, PUT Type?search, a JSON Patch in a Binary, DELETE Type?search', async () => {
    const existing = (await client.create({ resourceType: 'Patient', body: patient('BE-1') })) as Json;
    await client.create({ resourceType: 'Patient', body: patient('BE-3') });
    const patch = Buffer.from(JSON.stringify([{ op: 'add', path: '/gender', value: 'female' }])).toString('base64');
    const answer = (await client.transaction({
      body: {
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [
          {
            fullUrl: 'urn:uuid:5d0c7a4e-9a2b-4a55-8d1e-2f1b6f3c7a01',
            resource: patient('BE-1', 'Ignored'),
            request: { method: 'POST', url: 'Patient', ifNoneExist: 'identifier=BE-1' },
          },
          {
            resource: {
              resourceType: 'Observation',
              status: 'final',
              code: { text: 'height' },
              subject: { reference: 'urn:uuid:5d0c7a4e-9a2b-4a55-8d1e-2f1b6f3c7a01' },
            },
            request: { method: 'POST', url: 'Observation' },
          },
          { resource: patient('BE-2'), request: { method: 'PUT', url: 'Patient?identifier=BE-2' } },
          {
            resource: { resourceType: 'Binary', contentType: 'application/json-patch+json', data: patch },
            request: { method: 'PATCH', url: `Patient/${existing.id as string}` },
          },
          { request: { method: 'DELETE', url: 'Patient?identifier=BE-3' } },
        ],
      },
    })) as Json;
    expect(answer.entry.map((entry: Json) => entry.response.status)).toEqual(['200 OK', '201 Created', '201 Created', '200 OK', '204 No Content']);
    expect(answer.entry[0].resource.id).toBe(existing.id);
    expect(answer.entry[1].resource.subject.reference).toBe(`Patient/${existing.id as string}`);
    expect(answer.entry[3].resource).toMatchObject({ gender: 'female', meta: { versionId: '2' } });
    expect(((await client.search({ resourceType: 'Patient', searchParams: { identifier: 'BE-3' } })) as Json).total).toBe(0);

    // Several matches in a transaction: 412, and nothing of it written.
    const several = await refusal(
      client.transaction({
        body: {
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [
            { resource: patient('BE-4'), request: { method: 'POST', url: 'Patient' } },
            { resource: patient('BE-5'), request: { method: 'PUT', url: 'Patient?family=Kit' } },
          ],
        },
      }),
    );
    expect(several.status).toBe(412);
    expect(((await client.search({ resourceType: 'Patient', searchParams: { identifier: 'BE-4' } })) as Json).total).toBe(0);
  });

  it('operation() by GET and by POST: $status and $events read their parameters the same way', async () => {
    await addTopics(t.database.db, [JSON.parse(readFileSync('examples/topics/encounter-complete.json', 'utf8'))]);
    const topicReceiver = await startReceiver();
    const created = await t.fhir('POST', '/Subscription', {
      resourceType: 'Subscription',
      status: 'requested',
      reason: 'fhir-kit-client',
      criteria: 'http://example.org/topics/encounter-complete',
      channel: {
        type: 'rest-hook',
        endpoint: topicReceiver.url,
        payload: 'application/fhir+json',
        _payload: { extension: [{ url: 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition/backport-payload-content', valueCode: 'id-only' }] },
      },
    });
    const id = created.json<{ id: string }>().id;
    await untilStatus(t, id, 'active');
    for (const encounter of ['kit-1', 'kit-2']) {
      await client.update({
        resourceType: 'Encounter',
        id: encounter,
        body: { resourceType: 'Encounter', id: encounter, status: 'finished', class: { code: 'AMB' } },
      });
    }
    await topicReceiver.waitForCalls(3);
    await topicReceiver.close();

    const byGet = (await client.operation({ name: '$status', resourceType: 'Subscription', id, method: 'GET' })) as Json;
    const byPost = (await client.operation({ name: 'status', resourceType: 'Subscription', id })) as Json;
    for (const answer of [byGet, byPost]) {
      const status = answer.entry[0].resource.parameter;
      expect(status.find((part: Json) => part.name === 'events-since-subscription-start').valueString).toBe('2');
    }
    const typeLevel = (await client.operation({
      name: '$status',
      resourceType: 'Subscription',
      input: { resourceType: 'Parameters', parameter: [{ name: 'id', valueString: id }] },
    })) as Json;
    expect(typeLevel.total).toBe(1);

    const eventsByGet = (await client.operation({
      name: '$events',
      resourceType: 'Subscription',
      id,
      method: 'GET',
      input: { eventsSinceNumber: '2' },
    })) as Json;
    const eventsByPost = (await client.operation({
      name: '$events',
      resourceType: 'Subscription',
      id,
      input: { resourceType: 'Parameters', parameter: [{ name: 'eventsSinceNumber', valueString: '2' }] },
    })) as Json;
    for (const answer of [eventsByGet, eventsByPost]) {
      expect(answer.entry.slice(1).map((entry: Json) => entry.fullUrl)).toEqual([`${t.serviceBase}/Encounter/kit-2`]);
    }
    const wrong = await refusal(
      client.operation({
        name: '$events',
        resourceType: 'Subscription',
        id,
        input: { resourceType: 'Parameters', parameter: [{ name: 'since', valueString: '1' }] },
      }),
    );
    expect(wrong.status).toBe(400);
    expect(wrong.text).toContain("Unknown parameter 'since'");
  });

  it('conditional create (If-None-Exist) makes one resource however often and however concurrently it is sent', async () => {
    const ifNoneExist = { headers: { 'If-None-Exist': 'identifier=http://hospital.example/mrn|CC-1' } };
    const first = (await client.create({ resourceType: 'Patient', body: patient('CC-1'), options: ifNoneExist })) as Json;
    const again = (await client.create({ resourceType: 'Patient', body: patient('CC-1', 'Other'), options: ifNoneExist })) as Json;
    expect(again.id).toBe(first.id);
    expect(again.name[0].given).toEqual(['Ada']);

    const concurrent = await Promise.all(
      Array.from({ length: 8 }, () =>
        client.create({ resourceType: 'Patient', body: patient('CC-2'), options: { headers: { 'If-None-Exist': 'identifier=CC-2' } } }),
      ),
    );
    expect(new Set(concurrent.map((created) => (created as Json).id)).size).toBe(1);
    expect(((await client.search({ resourceType: 'Patient', searchParams: { identifier: 'CC-2' } })) as Json).total).toBe(1);

    // The create was notified once: the matches that created nothing wrote nothing.
    await untilNotified(first.id as string, 1);
    expect(notifiedVersions(first.id as string)).toEqual(['1']);

    const several = await refusal(client.create({ resourceType: 'Patient', body: patient('CC-4'), options: { headers: { 'If-None-Exist': 'family=Kit' } } }));
    expect(several.status).toBe(412);
    expect(several.text).toContain('More than one Patient matches family=Kit');
  });

  it('conditional update (PUT Type?search) creates, then updates what it selects; several are 412; the versions are notified', async () => {
    const created = (await client.update({
      resourceType: 'Patient',
      searchParams: { identifier: 'http://hospital.example/mrn|CU-1' },
      body: patient('CU-1'),
    })) as Json;
    expect(created.meta.versionId).toBe('1');
    const updated = (await client.update({
      resourceType: 'Patient',
      searchParams: { identifier: 'http://hospital.example/mrn|CU-1' },
      body: patient('CU-1', 'Grace'),
    })) as Json;
    expect(updated).toMatchObject({ id: created.id, meta: { versionId: '2' }, name: [{ given: ['Grace'] }] });
    await untilNotified(created.id as string, 2);

    const several = await refusal(client.update({ resourceType: 'Patient', searchParams: { family: 'Kit' }, body: patient('CU-2') }));
    expect(several.status).toBe(412);
    const wrongId = await refusal(
      client.update({ resourceType: 'Patient', searchParams: { identifier: 'CU-1' }, body: { ...patient('CU-1'), id: 'someone-else' } }),
    );
    expect(wrongId.status).toBe(400);
  });

  it('conditional delete deletes what the condition selects; a repeat deletes nothing and succeeds', async () => {
    const created = (await client.create({ resourceType: 'Patient', body: patient('CD-1') })) as Json;
    await client.request('Patient?identifier=CD-1', { method: 'DELETE' });
    expect(await refusal(client.read({ resourceType: 'Patient', id: created.id as string }))).toMatchObject({ status: 410 });
    await client.request('Patient?identifier=CD-1', { method: 'DELETE' });
    expect((await refusal(client.request('Patient?family=Kit', { method: 'DELETE' }))).status).toBe(412);
  });

  it('patch() applies a JSON Patch as a new version (notified); a failed test or a missing path is 422, a change of id 422, If-Match 412', async () => {
    const created = (await client.create({ resourceType: 'Patient', body: patient('PA-1') })) as Json;
    const id = created.id as string;
    const patched = (await client.patch({
      resourceType: 'Patient',
      id,
      jsonPatch: [
        { op: 'test', path: '/name/0/given/0', value: 'Ada' },
        { op: 'replace', path: '/name/0/given/0', value: 'Augusta' },
        { op: 'add', path: '/birthDate', value: '1815-12-10' },
      ],
    })) as Json;
    expect(patched).toMatchObject({ id, meta: { versionId: '2' }, birthDate: '1815-12-10', name: [{ given: ['Augusta'] }] });
    await untilNotified(id, 2);

    const failedTest = await refusal(client.patch({ resourceType: 'Patient', id, jsonPatch: [{ op: 'test', path: '/birthDate', value: '1900-01-01' }] }));
    expect(failedTest).toMatchObject({ status: 422 });
    expect(failedTest.text).toContain('operation 0 (test /birthDate)');
    expect(failedTest.text).not.toContain('Augusta');
    expect((await refusal(client.patch({ resourceType: 'Patient', id, jsonPatch: [{ op: 'remove', path: '/telecom/0' }] }))).status).toBe(422);
    expect((await refusal(client.patch({ resourceType: 'Patient', id, jsonPatch: [{ op: 'replace', path: '/id', value: 'other' }] }))).status).toBe(422);
    const stale = await refusal(
      client.patch({ resourceType: 'Patient', id, jsonPatch: [{ op: 'remove', path: '/birthDate' }], options: { headers: { 'If-Match': 'W/"1"' } } }),
    );
    expect(stale.status).toBe(412);
    expect(((await client.read({ resourceType: 'Patient', id })) as Json).meta.versionId).toBe('2');
  });

  it('history() at type and system level: newest first, _since and _count, nextPage and prevPage; deletions without a resource', async () => {
    const since = new Date().toISOString();
    const created = (await client.create({ resourceType: 'Basic', body: { resourceType: 'Basic', code: { text: 'history' } } })) as Json;
    await client.update({ resourceType: 'Basic', id: created.id as string, body: { ...created, resourceType: 'Basic', code: { text: 'history, twice' } } });
    await client.delete({ resourceType: 'Basic', id: created.id as string });
    await client.create({ resourceType: 'Flag', body: { resourceType: 'Flag', status: 'active', code: { text: 'h' }, subject: { reference: 'Patient/x' } } });

    const typeHistory = (await client.typeHistory({ resourceType: 'Basic' })) as Json;
    expect(typeHistory.type).toBe('history');
    expect(typeHistory.entry.map((entry: Json) => [entry.request.method, entry.response.etag, entry.resource === undefined])).toEqual([
      ['DELETE', 'W/"3"', true],
      ['PUT', 'W/"2"', false],
      ['POST', 'W/"1"', false],
    ]);

    const page1 = (await client.request(`_history?_since=${since}&_count=2`)) as Json;
    expect(page1.entry.map((entry: Json) => entry.fullUrl.split('/').slice(-2)[0])).toEqual(['Flag', 'Basic']);
    const page2 = (await client.nextPage(pageOf(page1))) as Json;
    expect(page2.entry.map((entry: Json) => entry.response.etag)).toEqual(['W/"2"', 'W/"1"']);
    expect(page2.link.some((link: Json) => link.relation === 'next')).toBe(false);
    const back = (await client.prevPage(pageOf(page2))) as Json;
    expect(back.entry.map((entry: Json) => entry.fullUrl)).toEqual(page1.entry.map((entry: Json) => entry.fullUrl));

    const systemHistory = (await client.systemHistory()) as Json;
    expect(systemHistory.entry.length).toBeGreaterThan(4);
    expect((await refusal(client.request('_history?_at=2026'))).status).toBe(400);
  });

  it('nextPage() and prevPage() walk a search both ways', async () => {
    const page1 = (await client.search({ resourceType: 'Patient', searchParams: { family: 'Kit', _count: 2 } })) as Json;
    const page2 = (await client.nextPage(pageOf(page1))) as Json;
    const back = (await client.prevPage(pageOf(page2))) as Json;
    expect(back.entry.map((entry: Json) => entry.fullUrl)).toEqual(page1.entry.map((entry: Json) => entry.fullUrl));
    expect(page1.link.some((link: Json) => link.relation === 'previous')).toBe(false);
  });

  it('answers 406 to a client that takes only XML, and 405 naming the methods a path offers', async () => {
    expect((await refusal(client.read({ resourceType: 'Patient', id: 'x', options: { headers: { accept: 'application/fhir+xml' } } }))).status).toBe(406);
    expect((await refusal(client.request('metadata?_format=xml'))).status).toBe(406);
    const notOffered = await refusal(client.request('Patient/x/_history', { method: 'DELETE' }));
    expect(notOffered).toMatchObject({ status: 405, text: 'DELETE is not supported on /fhir/resources/Patient/x/_history: it answers GET' });
  });
});

describe('conditional writes, history and links at their edges', () => {
  it('a conditional update that selects nothing does not overwrite another resource by its body id (409), and checks that id', async () => {
    const other = (await client.create({ resourceType: 'Patient', body: patient('EDGE-1') })) as Json;
    const overwrite = await refusal(
      client.update({ resourceType: 'Patient', searchParams: { identifier: 'EDGE-NONE' }, body: { ...patient('EDGE-NONE'), id: other.id as string } }),
    );
    expect(overwrite.status).toBe(409);
    expect(((await client.read({ resourceType: 'Patient', id: other.id as string })) as Json).identifier[0].value).toBe('EDGE-1');
    expect(
      (await refusal(client.update({ resourceType: 'Patient', searchParams: { identifier: 'EDGE-NONE' }, body: { ...patient('EDGE-NONE'), id: 'not an id' } })))
        .status,
    ).toBe(400);
    // A new id of its own is update-as-create.
    const created = (await client.update({
      resourceType: 'Patient',
      searchParams: { identifier: 'EDGE-2' },
      body: { ...patient('EDGE-2'), id: 'edge-2' },
    })) as Json;
    expect(created.id).toBe('edge-2');
  });

  it('If-Match applies to what a condition selects: a stale version is 412, and nothing is written', async () => {
    const created = (await client.create({ resourceType: 'Patient', body: patient('EDGE-3') })) as Json;
    await client.update({ resourceType: 'Patient', id: created.id as string, body: { ...patient('EDGE-3', 'Newer'), id: created.id as string } });
    const stale = await t.fhir('PUT', '/Patient?identifier=EDGE-3', patient('EDGE-3', 'Stale'), { 'if-match': 'W/"1"' });
    expect(stale.statusCode, stale.body).toBe(412);
    const current = await t.fhir('PUT', '/Patient?identifier=EDGE-3', patient('EDGE-3', 'Current'), { 'if-match': 'W/"2"' });
    expect(current.statusCode, current.body).toBe(200);
    expect(current.json()).toMatchObject({ meta: { versionId: '3' }, name: [{ given: ['Current'] }] });
  });

  it("a batch entry whose condition fails fails alone; a transaction entry whose match an earlier entry wrote is refused (its urn's references were resolved before)", async () => {
    const batch = (await client.batch({
      body: {
        resourceType: 'Bundle',
        type: 'batch',
        entry: [
          {
            fullUrl: 'urn:uuid:1b0e7a52-3c4d-4e5f-8a9b-0c1d2e3f4a50',
            resource: patient('EDGE-4'),
            request: { method: 'POST', url: 'Patient', ifNoneExist: 'family=Kit' },
          },
          { resource: patient('EDGE-5'), request: { method: 'POST', url: 'Patient' } },
        ],
      },
    })) as Json;
    expect(batch.entry.map((entry: Json) => entry.response.status)).toEqual(['412 Precondition Failed', '201 Created']);

    const dependent = await refusal(
      client.transaction({
        body: {
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [
            { resource: patient('EDGE-6'), request: { method: 'POST', url: 'Patient' } },
            {
              fullUrl: 'urn:uuid:2c1f8b63-4d5e-4f60-9bac-1d2e3f4a5b61',
              resource: patient('EDGE-6'),
              request: { method: 'POST', url: 'Patient', ifNoneExist: 'identifier=EDGE-6' },
            },
          ],
        },
      }),
    );
    expect(dependent.status).toBe(409);
    expect(dependent.text).toContain('Bundle.entry[1]');
    expect(((await client.search({ resourceType: 'Patient', searchParams: { identifier: 'EDGE-6' } })) as Json).total).toBe(0);
  });

  it('a PATCH that is not a JSON Patch is 415; a day that does not exist in _since is 400, not a 500', async () => {
    const created = (await client.create({ resourceType: 'Patient', body: patient('EDGE-7') })) as Json;
    const fhirPathPatch = await t.fhir('PATCH', `/Patient/${created.id as string}`, { resourceType: 'Parameters', parameter: [{ name: 'operation' }] });
    expect(fhirPathPatch.statusCode).toBe(415);
    for (const since of ['2026-02-30T00:00:00Z', '2026-04-31T00:00:00Z', '0000-01-01T00:00:00Z']) {
      const response = await t.fhir('GET', `/_history?_since=${since}`);
      expect(response.statusCode, since).toBe(400);
    }
    // A forged page token is refused before any of it reaches SQL: a day that does not exist, a key too short or too long.
    for (const key of [
      ['2026-02-30T00:00:00.000000Z', 'Patient', 'x', 1],
      ['2026-02-01T00:00:00.000000Z', 'Patient', 'x'],
      ['2026-02-01T00:00:00.000000Z', 'Patient', 'x', 1, 'before', 2],
    ]) {
      const response = await t.fhir('GET', `/_history?_page_token=${Buffer.from(JSON.stringify(key)).toString('base64url')}`);
      expect(response.statusCode, JSON.stringify(key)).toBe(400);
      expect(response.json().issue[0].details.text).toContain('Invalid _page_token');
    }
  });

  it('lenient handling drops from the links only the pair it left out, not another of the same name; _format=application/fhir+json and _pretty are served', async () => {
    const lenient = await t.fhir('GET', '/Patient?family=Kit&family=&_count=1', undefined, { prefer: 'handling=lenient' });
    expect(lenient.statusCode, lenient.body).toBe(200);
    const links = lenient.json().link as { relation: string; url: string }[];
    expect(links.find((link) => link.relation === 'self')!.url).toBe(`${t.serviceBase}/Patient?family=Kit&_count=1`);
    expect(links.find((link) => link.relation === 'next')!.url).toMatch(/\?family=Kit&_count=1&_page_token=/);
    expect((await t.fhir('GET', '/metadata?_format=application/fhir+json')).statusCode).toBe(200);
    expect((await t.fhir('GET', '/Patient/_history?_format=json&_pretty=true&_count=1')).statusCode).toBe(200);
    expect((await t.fhir('GET', '/Subscription/$status?_format=json')).statusCode).toBe(200);
  });
});
