import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileCriteria } from '../../src/search/criteria.ts';
import { maxAlternativeLength, maxAlternatives, maxQueryLength } from '../../src/search/query.ts';
import { serviceBase, startTestApp, type TestApp } from '../support/app.ts';

let t: TestApp;
const ids: Record<string, string> = {};

beforeAll(async () => {
  t = await startTestApp();
  const put = async (resource: { resourceType: string; id: string } & Record<string, unknown>) => {
    const response = await t.fhir('PUT', `/${resource.resourceType}/${resource.id}`, resource);
    expect(response.statusCode).toBe(201);
  };
  await put({ resourceType: 'Patient', id: 'anna', active: true, name: [{ family: 'Müller', given: ['Anna'] }], gender: 'female' });
  await put({ resourceType: 'Patient', id: 'bob', active: false, name: [{ family: 'Martin', given: ['Bob'] }] });
  await put({ resourceType: 'Practitioner', id: 'dr-x', name: [{ text: 'Dr X' }] });
  await put({ resourceType: 'Encounter', id: 'enc-1', status: 'finished', class: { code: 'AMB' }, subject: { reference: 'Patient/anna' } });
  await put({ resourceType: 'Encounter', id: 'enc-2', status: 'planned', class: { code: 'AMB' }, subject: { reference: 'Patient/bob' } });
  for (const [index, [status, patient]] of [
    ['booked', 'anna'],
    ['booked', 'bob'],
    ['cancelled', 'anna'],
    ['booked', 'anna'],
    ['booked', 'bob'],
  ].entries()) {
    const created = await t.fhir('POST', '/Appointment', {
      resourceType: 'Appointment',
      status,
      start: `2026-03-0${index + 1}T09:00:00+01:00`,
      end: `2026-03-0${index + 1}T09:30:00+01:00`,
      participant: [
        { actor: { reference: `Patient/${patient}` }, status: 'accepted' },
        { actor: { reference: 'Practitioner/dr-x' }, status: 'accepted' },
      ],
    });
    ids[`appointment${index}`] = created.json().id;
  }
});
afterAll(() => t.close());

type Entry = { fullUrl: string; resource: { resourceType: string; id: string }; search: { mode: string } };

async function search(path: string) {
  const response = await t.fhir('GET', path);
  expect(response.statusCode, response.body).toBe(200);
  const bundle = response.json();
  expect(bundle).toMatchObject({ resourceType: 'Bundle', type: 'searchset' });
  return bundle as { total?: number; link: { relation: string; url: string }[]; entry?: Entry[] };
}

/** An empty page has no entry array (FHIR JSON has no empty arrays). */
const keys = (entries: Entry[] | undefined, mode: string) =>
  (entries ?? []).filter((entry) => entry.search.mode === mode).map((entry) => `${entry.resource.resourceType}/${entry.resource.id}`);

describe('REST search', () => {
  it('pages Appointment?status=booked&_include=Appointment:patient&_count=2 with the right includes on every page', async () => {
    const seen: string[] = [];
    let url: string | undefined = '/Appointment?status=booked&_include=Appointment:patient&_count=2';
    let pages = 0;
    while (url) {
      const bundle = await search(url);
      pages++;
      const matched = keys(bundle.entry, 'match');
      seen.push(...matched);
      expect(matched.length).toBeLessThanOrEqual(2);
      // Each page includes exactly the patients of its own appointments.
      const expectedPatients = new Set(
        bundle
          .entry!.filter((entry) => entry.search.mode === 'match')
          .map((entry) => (entry.resource as unknown as { participant: { actor: { reference: string } }[] }).participant[0]!.actor.reference),
      );
      expect(new Set(keys(bundle.entry, 'include'))).toEqual(expectedPatients);
      for (const entry of bundle.entry!) expect(entry.fullUrl).toBe(`${serviceBase}/${entry.resource.resourceType}/${entry.resource.id}`);
      const next = bundle.link.find((link) => link.relation === 'next')?.url;
      expect(bundle.link.find((link) => link.relation === 'self')?.url).toContain('/Appointment?status=booked');
      url = next?.replace(serviceBase, '');
    }
    expect(pages).toBe(2);
    expect(seen).toEqual([ids.appointment0, ids.appointment1, ids.appointment3, ids.appointment4].map((id) => `Appointment/${id}`));
  });

  it('keeps pages stable when resources are created between them', async () => {
    const first = await search('/Appointment?_count=2');
    await t.fhir('POST', '/Appointment', {
      resourceType: 'Appointment',
      status: 'proposed',
      participant: [{ actor: { reference: 'Patient/bob' }, status: 'needs-action' }],
    });
    const next = first.link.find((link) => link.relation === 'next')!.url.replace(serviceBase, '');
    const second = await search(next);
    expect(keys(second.entry, 'match')).toEqual([`Appointment/${ids.appointment2}`, `Appointment/${ids.appointment3}`]);
  });

  it.each([
    ['/Patient?active=true', ['Patient/anna']],
    ['/Patient?name=mul', ['Patient/anna']],
    ['/Patient?name=MUL&gender=female', ['Patient/anna']],
    ['/Patient?name=m', ['Patient/anna', 'Patient/bob']],
    ['/Patient?name=m&name=bo', ['Patient/bob']],
    ['/Patient?gender:missing=true', ['Patient/bob']],
    ['/Appointment?_include=Appointment:actor:Practitioner&status=cancelled', [`Appointment/{appointment2}`, 'Practitioner/dr-x']],
    ['/Patient?_revinclude=Encounter:subject&active=true', ['Patient/anna', 'Encounter/enc-1']],
    ['/Encounter?subject=Patient/bob', ['Encounter/enc-2']],
    ['/Encounter?patient=anna&status=finished,planned', ['Encounter/enc-1']],
    ['/Appointment?date=2026-03-02&status=booked', [`Appointment/{appointment1}`]],
    ['/Appointment?date=ge2026-03-04T08:00:00Z', [`Appointment/{appointment3}`, `Appointment/{appointment4}`]],
    ['/Patient?_id=anna,bob&_sort=-_id', ['Patient/bob', 'Patient/anna']],
  ])('%s', async (path, expected) => {
    const bundle = await search(path);
    const resolved = expected.map((key) => key.replace(/\{(\w+)\}/, (_match, name: string) => ids[name]!));
    expect(bundle.entry!.map((entry) => `${entry.resource.resourceType}/${entry.resource.id}`)).toEqual(resolved);
  });

  it('answers _total=accurate, and a cheap total on a single page', async () => {
    expect((await search('/Appointment?status=booked&_total=accurate&_count=1')).total).toBe(4);
    expect((await search('/Patient?active=true')).total).toBe(1);
    expect((await search('/Appointment?_count=1')).total).toBeUndefined();
  });

  it('finds a resource changed after a given instant, to the microsecond', async () => {
    const before = (await t.fhir('GET', '/Patient/bob')).json().meta.lastUpdated as string;
    const updated = await t.fhir('PUT', '/Patient/bob', { resourceType: 'Patient', id: 'bob', active: false, name: [{ family: 'Martin' }] });
    const after = updated.json().meta.lastUpdated as string;
    expect(keys((await search(`/Patient?_lastUpdated=gt${encodeURIComponent(before)}`)).entry, 'match')).toContain('Patient/bob');
    expect(keys((await search(`/Patient?_lastUpdated=gt${encodeURIComponent(after)}`)).entry, 'match')).toEqual([]);
  });

  it('POST /{Type}/_search takes form-encoded parameters', async () => {
    const response = await t.app.inject({
      method: 'POST',
      url: '/fhir/resources/Patient/_search',
      headers: { 'x-api-key': t.apiKey, 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'active=true',
    });
    expect(response.statusCode).toBe(200);
    expect(keys(response.json().entry, 'match')).toEqual(['Patient/anna']);
  });

  it.each([
    ['/Patient?nonsense=1', /Unknown search parameter 'nonsense' for Patient/],
    ['/Patient?name:fuzzy=x', /Unknown modifier ':fuzzy' on string parameter 'name'/],
    ['/Appointment?date=yesterday', /'yesterday' is not a date for 'date'/],
    ['/Patient?_count=0', /_count must be an integer from 1 to 1000/],
    ['/Patient?_summary=true', /_summary supports count and false/],
    ['/Patient?_elements=nonsense', /Patient has no element 'nonsense'/],
    ['/Patient?_revinclude=*', /_revinclude=\* would read every resource type/],
    ['/Patient?_include=Patient:*:Practitioner', /a wildcard takes no target type/],
    ['/Patient?_sort=name', /_sort supports/],
    ['/Patient?_page_token=garbage', /Invalid _page_token/],
    ['/Patient?_include=Patient:name', /'name' is not a reference parameter/],
    ['/Patient?active:missing=maybe', /':missing' takes true or false/],
    ['/Patient?deceased=true', /search parameter deceased is not supported/],
    ['/Patient?name=%E0%A4%A', /Malformed percent-encoding/],
  ])('%s is refused with 400 naming the problem', async (path, message) => {
    const response = await t.fhir('GET', path);
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0].details.text).toMatch(message);
  });

  it('under Prefer: handling=lenient, leaves out unusable parameters and says so', async () => {
    const response = await t.fhir('GET', '/Patient?nonsense=1&active=true', undefined, { prefer: 'handling=lenient' });
    expect(response.statusCode).toBe(200);
    const bundle = response.json();
    expect(keys(bundle.entry, 'match')).toEqual(['Patient/anna']);
    const outcome = bundle.entry.find((entry: Entry) => entry.search.mode === 'outcome').resource;
    expect(outcome.issue).toEqual([
      { severity: 'warning', code: 'not-supported', details: { text: "nonsense: Unknown search parameter 'nonsense' for Patient" } },
    ]);
    // self is the search as it ran: without what was left out.
    expect(bundle.link).toEqual([{ relation: 'self', url: `${serviceBase}/Patient?active=true` }]);
  });

  it('pages forward and back: a page reached by a token has previous, and previous leads back to the same page', async () => {
    const first = await search('/Patient?_count=1&_sort=_id');
    expect(first.link.map((link: { relation: string }) => link.relation)).toEqual(['self', 'next']);
    const url = (bundle: { link: { relation: string; url: string }[] }, relation: string) =>
      bundle.link.find((link) => link.relation === relation)!.url.replace(serviceBase, '');
    const second = await search(url(first, 'next'));
    expect(second.link.map((link: { relation: string }) => link.relation)).toEqual(expect.arrayContaining(['self', 'previous']));
    const back = await search(url(second, 'previous'));
    expect(keys(back.entry, 'match')).toEqual(keys(first.entry, 'match'));
    expect(back.link.map((link: { relation: string }) => link.relation)).toEqual(['self', 'next']);
    const forth = await search(url(back, 'next'));
    expect(keys(forth.entry, 'match')).toEqual(keys(second.entry, 'match'));
  });

  it('_summary=count answers the total alone', async () => {
    const bundle = await search('/Appointment?status=booked&_summary=count');
    expect(bundle.total).toBe(4);
    expect(bundle.entry).toBeUndefined();
  });

  it('_elements keeps the elements asked for in each match, tagged SUBSETTED; included resources stay whole', async () => {
    const bundle = await search(`/Appointment?_id=${ids.appointment0}&_elements=status,start&_include=Appointment:patient`);
    const [match, included] = bundle.entry!;
    expect(Object.keys(match!.resource).sort()).toEqual(['id', 'meta', 'resourceType', 'start', 'status']);
    expect((match!.resource as unknown as { meta: { tag: unknown[] } }).meta.tag).toContainEqual({
      system: 'http://terminology.hl7.org/CodeSystem/v3-ObservationValue',
      code: 'SUBSETTED',
    });
    expect(included!.resource).toMatchObject({ resourceType: 'Patient', id: 'anna', name: [{ family: 'Müller' }] });
  });

  it.each(['_include=*', '_include=Appointment:*', '_include:iterate=Appointment:*'])('%s includes every resource the matches refer to', async (include) => {
    const bundle = await search(`/Appointment?_id=${ids.appointment0}&${include}`);
    expect(keys(bundle.entry, 'include').sort()).toEqual(['Patient/anna', 'Practitioner/dr-x']);
  });

  it('_revinclude=Encounter:* finds the encounters that refer to the matches by any parameter', async () => {
    const bundle = await search('/Patient?_id=anna&_revinclude=Encounter:*');
    expect(keys(bundle.entry, 'include')).toEqual(['Encounter/enc-1']);
  });

  it('never matches deleted resources', async () => {
    await t.fhir('PUT', '/Patient/gone', { resourceType: 'Patient', id: 'gone', active: true });
    await t.fhir('DELETE', '/Patient/gone');
    expect(keys((await search('/Patient?active=true')).entry, 'match')).toEqual(['Patient/anna']);
  });
});

describe('criteria compiled for subscriptions', () => {
  it.each([
    'Appointment?_include=Appointment:patient',
    'Appointment?_include=Appointment:actor:Practitioner',
    'Patient?_revinclude=Encounter:subject',
    'Patient?active=true',
    'Appointment?status=booked',
    'Appointment?status=booked&_include=Appointment:patient&date=ge2026-01-01',
  ])('compiles %s', (criteria) => {
    const compiled = compileCriteria(criteria);
    expect(compiled.resourceType).toBe(criteria.split('?')[0]);
    expect(JSON.parse(JSON.stringify(compiled))).toEqual(compiled);
  });

  it('keeps only active, status and :missing for deletions', () => {
    const compiled = compileCriteria('Appointment?status=booked&date=ge2026-01-01&reason-code:missing=true&_include=Appointment:patient');
    expect(compiled.match).toContain('"status"');
    expect(compiled.match).toContain('"start"');
    expect(compiled.matchDeleted).toContain('"status"');
    expect(compiled.matchDeleted).toContain('"reasonCode"');
    expect(compiled.matchDeleted).not.toContain('"start"');
    expect(compiled.include).toEqual([{ sourceType: 'Appointment', parameter: 'patient', iterate: false }]);
    expect(compileCriteria('Appointment?date=ge2026-01-01').matchDeleted).toBeNull();
    expect(compileCriteria('Appointment')).toEqual({
      resourceType: 'Appointment',
      match: null,
      matchDeleted: null,
      relatedMatch: null,
      matchTerms: null,
      include: [],
      revinclude: [],
    });
  });

  it('evaluates the compiled predicates in SQL against the current content', async () => {
    const { match, matchDeleted } = compileCriteria('Patient?active=true&name=mül');
    const { rows } = await t.database.pool.query<{ id: string; matched: boolean; matched_deleted: boolean }>(
      `SELECT id, jsonb_path_match(content, $1::jsonpath) AS matched, jsonb_path_match(content, $2::jsonpath) AS matched_deleted
       FROM fhir.resources WHERE resource_type = 'Patient' ORDER BY id`,
      [match, matchDeleted],
    );
    expect(rows).toEqual([
      { id: 'anna', matched: true, matched_deleted: true },
      { id: 'bob', matched: false, matched_deleted: false },
    ]);
  });

  it.each([
    ['Appointment?_count=5', /_count has no meaning in subscription criteria/],
    ['Appointment?_summary=count', /_summary has no meaning in subscription criteria/],
    ['Appointment?_elements=status', /_elements has no meaning in subscription criteria/],
    ['Nothing?status=booked', /'Nothing' is not an R4 resource type/],
    ['Appointment?bogus=1', /Unknown search parameter 'bogus'/],
  ])('refuses %s', (criteria, message) => {
    expect(() => compileCriteria(criteria)).toThrow(message);
  });
});

describe('OR-lists: each alternative is bounded, and the number of them, and the whole query, not their sum', () => {
  const postSearch = (type: string, body: string) =>
    t.app.inject({
      method: 'POST',
      url: `/fhir/resources/${type}/_search`,
      headers: { 'x-api-key': t.apiKey, 'content-type': 'application/x-www-form-urlencoded' },
      payload: body,
    });
  /** 200 random characters, as HAPI's matcher cases have them (and which PostgreSQL cannot compress). */
  const randomName = () => randomBytes(100).toString('hex');

  it('Patient?_id= with 30 UUIDs finds the 30 patients: a known set fetched in one call', async () => {
    const uuids = Array.from({ length: 30 }, () => randomUUID());
    for (const id of uuids) expect((await t.fhir('PUT', `/Patient/${id}`, { resourceType: 'Patient', id })).statusCode).toBe(201);
    const query = `_id=${uuids.join(',')}&_count=100`;
    expect(query.length).toBeGreaterThan(maxAlternativeLength);
    expect(keys((await search(`/Patient?${query}`)).entry, 'match').sort()).toEqual(uuids.map((id) => `Patient/${id}`).sort());
  });

  it("takes 51 alternatives of 200 characters on name (HAPI's matcher case) and finds the patient one of them names", async () => {
    const names = Array.from({ length: 51 }, randomName);
    await t.fhir('PUT', '/Patient/long-name', { resourceType: 'Patient', id: 'long-name', name: [{ family: names[25] }] });
    const bundle = await search(`/Patient?name=${names.join(',')}`);
    expect(keys(bundle.entry, 'match')).toEqual(['Patient/long-name']);
  });

  it(`takes ${maxAlternatives} alternatives and refuses ${maxAlternatives + 1}, naming the parameter and the limit`, async () => {
    const ids = (count: number) => Array.from({ length: count }, (_, index) => `p${index}`).join(',');
    await search(`/Patient?_id=${ids(maxAlternatives)}`);
    const response = await t.fhir('GET', `/Patient?_id=${ids(maxAlternatives + 1)}`);
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0]).toMatchObject({
      code: 'too-costly',
      details: { text: "Search parameter '_id' has 101 comma-separated alternatives; the limit is 100" },
    });
  });

  it('refuses an alternative of 1,025 characters, naming the parameter, the alternative, its length and the limit; 1,024 pass', async () => {
    await search(`/Patient?name=anna,${'a'.repeat(maxAlternativeLength)}`);
    const response = await t.fhir('GET', `/Patient?name=anna,${'a'.repeat(maxAlternativeLength + 1)}`);
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0]).toMatchObject({
      code: 'too-costly',
      details: { text: "Search parameter 'name': its alternative 2 of 2 has 1,025 characters; the limit is 1,024 for each comma-separated alternative" },
    });
    // In a chain and in _has too, which parse their values alike.
    for (const path of [`/Encounter?subject:Patient.name=${'a'.repeat(1_025)}`, `/Patient?_has:Encounter:subject:status=${'a'.repeat(1_025)}`]) {
      const refused = await t.fhir('GET', path);
      expect(refused.statusCode, path).toBe(400);
      expect(refused.json().issue[0].details.text).toMatch(/its value has 1,025 characters; the limit is 1,024/);
    }
  });

  /** `_id=anna,bob&_count=1` padded to `length` with a _format value (read as JSON: a parameter no bound of its own limits). */
  const paddedTo = (length: number) => {
    // The padding is a page size of 1 written with leading zeros: the query stays the same search.
    const start = '_id=anna,bob&_count=';
    return `${start}${'0'.repeat(length - start.length - 1)}1`;
  };

  it(`takes a query of ${maxQueryLength.toLocaleString('en')} characters, whose next link (its page token added) is taken too`, async () => {
    const response = await postSearch('Patient', paddedTo(maxQueryLength));
    expect(response.statusCode, response.body).toBe(200);
    expect(keys(response.json().entry, 'match')).toEqual(['Patient/anna']);
    const next = response.json().link.find((link: { relation: string }) => link.relation === 'next').url as string;
    expect(next.length - next.indexOf('?') - 1).toBeGreaterThan(maxQueryLength);
    expect(keys((await search(next.replace(serviceBase, ''))).entry, 'match')).toEqual(['Patient/bob']);
  });

  it(`refuses a query of ${(maxQueryLength + 1).toLocaleString('en')} characters with 400 too-costly, in the URL or a POST _search body`, async () => {
    const text = 'The search query has 16,385 characters; the limit is 16,384';
    const byPost = await postSearch('Patient', paddedTo(maxQueryLength + 1));
    expect(byPost.statusCode).toBe(400);
    expect(byPost.json().issue[0]).toMatchObject({ code: 'too-costly', details: { text } });
    const byGet = await t.fhir('GET', `/Patient?${paddedTo(maxQueryLength + 1)}`);
    expect(byGet.statusCode).toBe(400);
    expect(byGet.json().issue[0]).toMatchObject({ code: 'too-costly', details: { text } });
    // Parameters that AND: 17 of 1,000 characters are each within their bound, not together.
    const repeated = Array.from({ length: 17 }, () => `name:contains=${'a'.repeat(1_000)}`).join('&');
    const refused = await postSearch('Patient', repeated);
    expect(refused.statusCode).toBe(400);
    expect(refused.json().issue[0].details.text).toMatch(/the limit is 16,384/);
  });
});
