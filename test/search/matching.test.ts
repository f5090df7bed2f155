import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resourceTypes } from '../../src/fhir/definitions.ts';
import { compileFilters, parentsOf } from '../../src/search/jsonpath.ts';
import { isSupported, searchParametersOf } from '../../src/search/parameters.ts';
import { parseSearchQuery } from '../../src/search/query.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { matchesSearch } from '../support/search-oracle.ts';
import { subscribe } from '../support/subscriptions.ts';

/**
 * Search semantics checked both ways a user meets them: as a REST search
 * (`GET /{Type}?_id=…&<query>`) and as subscription criteria (a write of the
 * resource records a notification event through the real triggers). Each case is a
 * stored resource, a query and whether it matches.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

type Resource = { resourceType: string; id: string } & Record<string, unknown>;

async function store(resource: Resource): Promise<void> {
  const response = await t.fhir('PUT', `/${resource.resourceType}/${resource.id}`, resource);
  expect(response.statusCode, response.body).toBeLessThan(300);
}

async function foundBySearch(resource: Resource, query: string): Promise<boolean> {
  const response = await t.fhir('GET', `/${resource.resourceType}?_id=${resource.id}&${query}`);
  expect(response.statusCode, response.body).toBe(200);
  return (response.json().entry ?? []).some((entry: { search: { mode: string } }) => entry.search.mode === 'match');
}

/** Whether writing the resource notifies an active subscription with these criteria (the trigger's own evaluation). */
async function notifiesSubscription(resource: Resource, query: string): Promise<boolean> {
  const { id } = await subscribe(t, `${resource.resourceType}?_id=${resource.id}&${query}`, 'http://127.0.0.1:9/hook');
  await t.database.pool.query(`UPDATE webhook.subscriptions SET status = 'active' WHERE id = $1`, [id]);
  await t.database.pool.query('UPDATE fhir.resources SET content = content WHERE resource_type = $1 AND id = $2', [resource.resourceType, resource.id]);
  const { rows } = await t.database.pool.query<{ count: number }>('SELECT count(*)::int AS count FROM webhook.subscription_events WHERE subscription_id = $1', [
    id,
  ]);
  await t.database.pool.query(`UPDATE webhook.subscriptions SET status = 'off', ended_at = now() WHERE id = $1`, [id]);
  return rows[0]!.count > 0;
}

async function expectMatch(resource: Resource, query: string, expected: boolean): Promise<void> {
  expect(await foundBySearch(resource, query), `search ${resource.resourceType}?${query}`).toBe(expected);
  expect(await notifiesSubscription(resource, query), `criteria ${resource.resourceType}?${query}`).toBe(expected);
}

type Case = [query: string, expected: boolean];

function cases(resource: Resource, table: Case[]) {
  describe(`${resource.resourceType} ${JSON.stringify(resource)}`, () => {
    beforeAll(() => store(resource));
    it.each(table)('?%s matches: %s', (query, expected) => expectMatch(resource, query, expected));
  });
}

describe('number and quantity parameters over a Range', () => {
  // Condition.abatement-age is `abatement.as(Age) | abatement.as(Range)`: the Range branch once never matched.
  // An abated Condition is no longer active (con-4).
  const resolved = { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/condition-clinical', code: 'resolved' }] };
  cases(
    {
      resourceType: 'Condition',
      id: 'abated',
      clinicalStatus: resolved,
      subject: { reference: 'Patient/p' },
      abatementRange: { low: { value: 1, unit: 'a' }, high: { value: 1, unit: 'a' } },
    },
    [
      ['abatement-age=1', true],
      ['abatement-age=2', false],
      ['abatement-age=gt0', true],
      ['abatement-age=lt1', false],
      ['abatement-age=le1', true],
      ['abatement-age=ne1', false],
      ['abatement-age=ap1.05', true],
      ['abatement-age=1||a', true],
      ['abatement-age=1||mo', false],
    ],
  );
  // An open Range (no high): from 10 years on.
  cases({ resourceType: 'Condition', id: 'onset', subject: { reference: 'Patient/p' }, onsetRange: { low: { value: 10, unit: 'a' } } }, [
    ['onset-age=gt50', true],
    ['onset-age=lt5', false],
    ['onset-age=10', false],
    ['onset-age=ne10', true],
    ['onset-age=sa5', true],
    ['onset-age=eb100', false],
    ['onset-age=ap200', true],
  ]);
  // A probability Range is in percent (ras-1): from 20 % to 40 %.
  const percent = (value: number) => ({ value, unit: '%', system: 'http://unitsofmeasure.org', code: '%' });
  cases(
    {
      resourceType: 'RiskAssessment',
      id: 'risk',
      subject: { reference: 'Patient/p' },
      status: 'final',
      prediction: [{ probabilityRange: { low: percent(20), high: percent(40) } }],
    },
    [
      ['probability=gt30', true],
      ['probability=sa40', false],
      ['probability=sa10', true],
      ['probability=eb50', true],
      ['probability=30', false],
    ],
  );
});

describe('quantity parameters over Money, and over what has no single quantity', () => {
  cases(
    {
      resourceType: 'ChargeItem',
      id: 'charge',
      status: 'billable',
      code: { text: 'x' },
      subject: { reference: 'Patient/p' },
      priceOverride: { value: 10, currency: 'EUR' },
    },
    [
      ['price-override=10', true],
      ['price-override=10||EUR', true],
      ['price-override=10|urn:iso:std:iso:4217|EUR', true],
      ['price-override=10||USD', false],
      ['price-override=10|http://unitsofmeasure.org|EUR', false],
      ['price-override=gt9', true],
    ],
  );
  cases(
    { resourceType: 'Observation', id: 'sampled', status: 'final', code: { text: 'x' }, valueSampledData: { origin: { value: 1 }, period: 1, dimensions: 1 } },
    [
      ['value-quantity=1', false],
      ['value-quantity:missing=false', true],
    ],
  );
  // A date parameter over performedAge: an Age is no date (it once read as an open Period, matching every date).
  cases(
    {
      resourceType: 'Procedure',
      id: 'aged',
      status: 'completed',
      subject: { reference: 'Patient/p' },
      performedAge: { value: 5, unit: 'a', system: 'http://unitsofmeasure.org', code: 'a' },
    },
    [
      ['date=ge2000', false],
      ['date=lt2000', false],
      ['date:missing=false', true],
    ],
  );
});

describe('the ap prefix', () => {
  cases({ resourceType: 'Encounter', id: 'long', status: 'finished', class: { code: 'AMB' }, length: { value: 100, unit: 'min' } }, [
    ['length=ap95', true],
    ['length=ap110', true],
    ['length=ap80', false],
    ['length=ap112', false],
  ]);
  it('on a date, is within 10% of the gap between now and the date (REST search; criteria refuse it)', async () => {
    const born = { resourceType: 'Patient', id: 'born', birthDate: '2020-01-15' };
    await store(born);
    const yearsAgo = (new Date().getUTCFullYear() - 2020) * 0.1;
    expect(yearsAgo).toBeGreaterThan(0.5);
    expect(await foundBySearch(born, 'birthdate=ap2020-06-01')).toBe(true);
    expect(await foundBySearch(born, 'birthdate=ap2019-01-01')).toBe(false);
    const response = await t.fhir('POST', '/Subscription', {
      resourceType: 'Subscription',
      status: 'requested',
      criteria: 'Patient?birthdate=ap2020-06-01',
      reason: 'test',
      channel: { type: 'rest-hook', endpoint: 'http://127.0.0.1:9/hook', payload: 'application/fhir+json' },
    });
    expect(response.statusCode).toBe(400);
    expect(JSON.stringify(response.json())).toMatch(/ap on a date/);
  });
});

describe('canonical references', () => {
  cases({ resourceType: 'QuestionnaireResponse', id: 'relative', status: 'completed', questionnaire: 'Questionnaire/123' }, [
    ['questionnaire=Questionnaire/123', true],
    ['questionnaire=123', true],
    ['questionnaire=Questionnaire/124', false],
  ]);
  cases({ resourceType: 'QuestionnaireResponse', id: 'versioned', status: 'completed', questionnaire: 'http://x.org/Questionnaire/q|2.0' }, [
    ['questionnaire=http://x.org/Questionnaire/q', true],
    ['questionnaire=http://x.org/Questionnaire/q%7C2.0', true],
    ['questionnaire=http://x.org/Questionnaire/q%7C1.0', false],
    ['questionnaire=http://x.org/Questionnaire/qq', false],
  ]);
});

describe('uri parameters, :above and :below', () => {
  cases({ resourceType: 'ValueSet', id: 'deep', status: 'active', url: 'http://acme.org/fhir/ValueSet/123' }, [
    ['url=http://acme.org/fhir/ValueSet/123', true],
    ['url:below=http://acme.org/fhir/', true],
    ['url:below=http://acme.org/other', false],
    ['url:above=http://acme.org/fhir/ValueSet/123/_history/5', true],
    ['url:above=http://acme.org/fhir/ValueSet', false],
  ]);
  cases({ resourceType: 'ValueSet', id: 'root', status: 'active', url: 'http://acme.org/fhir/' }, [
    ['url:above=http://acme.org/fhir/ValueSet/123', true],
    ['url:below=http://acme.org/fhir/ValueSet', false],
  ]);
  cases({ resourceType: 'Patient', id: 'profiled', meta: { profile: ['http://x.org/P|1.0'] } }, [
    ['_profile=http://x.org/P', true],
    ['_profile=http://x.org/P%7C1.0', true],
    ['_profile=http://x.org/P%7C2.0', false],
  ]);

  it('lists a uri and its parents for :above', () => {
    expect(parentsOf('http://a.org/fhir/ValueSet/1')).toEqual([
      'http://a.org/fhir/ValueSet/1',
      'http://a.org/fhir/ValueSet/',
      'http://a.org/fhir/ValueSet',
      'http://a.org/fhir/',
      'http://a.org/fhir',
      'http://a.org/',
      'http://a.org',
    ]);
    expect(parentsOf('urn:uuid:7')).toEqual(['urn:uuid:7']);
    expect(parentsOf('/a/b')).toEqual(['/a/b', '/a/', '/a', '/']);
  });
});

describe('composite parameters', () => {
  const loinc = 'http://loinc.org';
  cases(
    {
      resourceType: 'Observation',
      id: 'pressure',
      status: 'final',
      code: { coding: [{ system: loinc, code: '85354-9' }] },
      component: [
        { code: { coding: [{ system: loinc, code: '8480-6' }] }, valueQuantity: { value: 120, system: 'http://unitsofmeasure.org', code: 'mm[Hg]' } },
        { code: { coding: [{ system: loinc, code: '8462-4' }] }, valueQuantity: { value: 80, system: 'http://unitsofmeasure.org', code: 'mm[Hg]' } },
      ],
    },
    [
      [`component-code-value-quantity=${loinc}|8480-6$gt100`, true],
      // 8462-4 is 80: a value above 100 in another component does not count.
      [`component-code-value-quantity=${loinc}|8462-4$gt100`, false],
      [`component-code-value-quantity=${loinc}|8462-4$lt100||mm[Hg]`, true],
      [`component-code-value-quantity=${loinc}|8462-4$gt100,${loinc}|8480-6$ap120`, true],
      [`combo-code-value-quantity=8480-6$120`, true],
      [`code-value-quantity=85354-9$120`, false],
    ],
  );
  it('refuses a value without one part per component, naming them', async () => {
    const response = await t.fhir('GET', '/Observation?component-code-value-quantity=8480-6');
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0].details.text).toMatch(/takes 2 values separated by '\$' \(component-code\$component-value-quantity\)/);
  });
});

describe('chained parameters and _has', () => {
  beforeAll(async () => {
    await store({ resourceType: 'Patient', id: 'smith', active: true, name: [{ family: 'Smith' }], identifier: [{ system: 'http://x', value: '123' }] });
    await store({ resourceType: 'Patient', id: 'jones', active: false, name: [{ family: 'Jones' }] });
    await store({
      resourceType: 'Observation',
      id: 'smith-code',
      status: 'final',
      code: { coding: [{ system: 'http://loinc.org', code: '1234-5' }] },
      subject: { reference: 'Patient/smith' },
    });
  });
  const visit = { start: '2026-03-02T09:00:00Z', end: '2026-03-02T09:30:00Z' };
  cases(
    {
      resourceType: 'Appointment',
      id: 'smith-visit',
      status: 'booked',
      ...visit,
      participant: [{ actor: { reference: 'Patient/smith' }, status: 'accepted' }],
    },
    [
      ['patient.identifier=http://x|123', true],
      ['patient.identifier=http://x|999', false],
      ['patient.name=jones', false],
      ['patient.name=jones,smi', true],
      ['actor:Patient.active=true', true],
      ['actor:Patient.active=true&patient.name=jones', false],
      ['patient.name:exact=Smith', true],
    ],
  );
  cases({ resourceType: 'Encounter', id: 'jones-stay', status: 'finished', class: { code: 'IMP' }, subject: { reference: 'Patient/jones' } }, [
    ['subject:Patient.active=false', true],
    ['subject:Patient.active=true', false],
    // subject may name a Patient or a Group: both define name.
    ['subject.name=jon', true],
  ]);
  cases({ resourceType: 'Patient', id: 'smith-again', active: true, link: [{ other: { reference: 'Patient/smith' }, type: 'seealso' }] }, [
    ['link.identifier=http://x|123', true],
    ['_has:Observation:patient:code=1234-5', false],
  ]);
  describe('reverse chaining', () => {
    it.each([
      ['smith', '_has:Observation:patient:code=1234-5', true],
      ['jones', '_has:Observation:patient:code=1234-5', false],
      ['smith', '_has:Observation:patient:code=9999-9', false],
      ['smith', '_has:Observation:subject:status=final', true],
    ] as const)('Patient/%s?%s matches: %s', async (id, query, expected) => {
      await expectMatch({ resourceType: 'Patient', id }, query, expected);
    });
  });

  it('in criteria, sees the referenced resource as the writing transaction left it', async () => {
    await store({ resourceType: 'Patient', id: 'renamed', name: [{ family: 'Before' }] });
    await store({
      resourceType: 'Appointment',
      id: 'renamed-visit',
      status: 'booked',
      ...visit,
      participant: [{ actor: { reference: 'Patient/renamed' }, status: 'accepted' }],
    });
    const { id } = await subscribe(t, 'Appointment?patient.name=after', 'http://127.0.0.1:9/hook');
    await t.database.pool.query(`UPDATE webhook.subscriptions SET status = 'active' WHERE id = $1`, [id]);
    const client = await t.database.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(
        `UPDATE fhir.resources SET content = jsonb_set(content, '{name}', '[{"family": "After"}]') WHERE resource_type = 'Patient' AND id = 'renamed'`,
      );
      await client.query(`UPDATE fhir.resources SET content = content WHERE resource_type = 'Appointment' AND id = 'renamed-visit'`);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const { rows } = await t.database.pool.query<{ resource_id: string }>(
      'SELECT resource_id FROM webhook.subscription_events WHERE subscription_id = $1 ORDER BY id',
      [id],
    );
    expect(rows.map((row) => row.resource_id)).toEqual(['renamed-visit']);
    await t.database.pool.query(`UPDATE webhook.subscriptions SET status = 'off', ended_at = now() WHERE id = $1`, [id]);
  });

  it.each([
    ['/Appointment?patient.link.identifier=x', /chains more than one level/],
    ['/Observation?focus.name=x', /'focus' may refer to any type: name one, as focus:Type.name/],
    ['/Appointment?patient.nonsense=x', /Unknown search parameter 'nonsense' for Patient/],
    ['/Appointment?status.name=x', /'status' is not a reference parameter/],
    ['/Patient?_has:Observation:patient:_has:Encounter:subject:status=x', /nests _has/],
    ['/Patient?_has:Observation:code:status=x', /'code' is not a reference parameter/],
    ['/Patient?_has:Appointment:practitioner:status=booked', /Appointment.practitioner cannot refer to Patient/],
  ])('refuses %s, saying why', async (path, message) => {
    const response = await t.fhir('GET', path);
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0].details.text).toMatch(message);
  });
});

describe('_include of an array-valued reference', () => {
  it('Patient?_include=Patient:general-practitioner includes each referenced Practitioner', async () => {
    await store({ resourceType: 'Practitioner', id: 'gp1', active: true });
    await store({ resourceType: 'Organization', id: 'org1', active: true });
    await store({ resourceType: 'Patient', id: 'cared', generalPractitioner: [{ reference: 'Practitioner/gp1' }, { reference: 'Organization/org1' }] });
    const response = await t.fhir('GET', '/Patient?_id=cared&_include=Patient:general-practitioner');
    const included = response.json().entry.filter((entry: { search: { mode: string } }) => entry.search.mode === 'include');
    expect(included.map((entry: { resource: Resource }) => `${entry.resource.resourceType}/${entry.resource.id}`).sort()).toEqual([
      'Organization/org1',
      'Practitioner/gp1',
    ]);
    const practitionersOnly = await t.fhir('GET', '/Patient?_id=cared&_include=Patient:general-practitioner:Practitioner');
    expect(practitionersOnly.json().entry.filter((entry: { search: { mode: string } }) => entry.search.mode === 'include')).toHaveLength(1);
  });
});

/**
 * For each pair of parameter type and element type that the R4 parameters
 * compile to, one stored value of that element type and a search that must
 * (or, where the element cannot hold such a value, must not) match it,
 * judged by the compiled predicate in PostgreSQL and by the FHIRPath oracle.
 * A new pair (a new definitions package) fails until it has its example.
 */
describe('every parameter type × element type pair the compiler accepts', () => {
  type Example = [resource: Record<string, unknown> & { resourceType: string }, query: string, matches: boolean];
  const period = { start: '2026-01-01', end: '2026-01-02' };
  const examples: Record<string, Example> = {
    'date:Age': [{ resourceType: 'Procedure', performedAge: { value: 5, unit: 'a' } }, 'date=ge2000', false],
    'date:Range': [{ resourceType: 'Procedure', performedRange: { low: { value: 5 } } }, 'date=ge2000', false],
    'date:string': [{ resourceType: 'Procedure', performedString: '2026-01-01' }, 'date=2026', false],
    'date:Period': [{ resourceType: 'Encounter', period }, 'date=2026-01', true],
    'date:Timing': [{ resourceType: 'Observation', effectiveTiming: { event: ['2026-01-01'] } }, 'date=2026', true],
    'date:date': [{ resourceType: 'Patient', birthDate: '2026-01-15' }, 'birthdate=2026-01', true],
    'date:dateTime': [{ resourceType: 'Observation', effectiveDateTime: '2026-01-01T10:00:00Z' }, 'date=2026-01-01', true],
    'date:instant': [{ resourceType: 'Appointment', start: '2026-01-01T10:00:00Z' }, 'date=lt2026-02', true],
    'number:Range': [
      { resourceType: 'RiskAssessment', prediction: [{ probabilityRange: { low: { value: 0.2 }, high: { value: 0.3 } } }] },
      'probability=gt0.25',
      true,
    ],
    'number:decimal': [{ resourceType: 'RiskAssessment', prediction: [{ probabilityDecimal: 0.2 }] }, 'probability=0.2', true],
    'number:integer': [{ resourceType: 'MolecularSequence', variant: [{ start: 7 }] }, 'variant-start=ge7', true],
    'quantity:Age': [
      { resourceType: 'Condition', onsetAge: { value: 5, code: 'a', system: 'http://unitsofmeasure.org' } },
      'onset-age=5|http://unitsofmeasure.org|a',
      true,
    ],
    'quantity:Duration': [{ resourceType: 'Encounter', length: { value: 30, unit: 'min' } }, 'length=30||min', true],
    'quantity:Money': [{ resourceType: 'ChargeItem', priceOverride: { value: 10, currency: 'EUR' } }, 'price-override=10||EUR', true],
    'quantity:Quantity': [{ resourceType: 'Observation', valueQuantity: { value: 5.4, code: 'mg' } }, 'value-quantity=5.4||mg', true],
    'quantity:Range': [{ resourceType: 'Condition', onsetRange: { low: { value: 1, code: 'a' }, high: { value: 3, code: 'a' } } }, 'onset-age=gt2', true],
    'quantity:SampledData': [{ resourceType: 'Observation', valueSampledData: { origin: { value: 1 }, period: 1, dimensions: 1 } }, 'value-quantity=1', false],
    'reference:Attachment': [
      { resourceType: 'Consent', sourceAttachment: { url: 'http://x.org/consent.pdf' } },
      'source-reference=http://x.org/consent.pdf',
      true,
    ],
    'reference:Reference': [{ resourceType: 'Observation', subject: { reference: 'Patient/p1' } }, 'subject=Patient/p1', true],
    'reference:Resource': [
      { resourceType: 'Bundle', type: 'document', entry: [{ resource: { resourceType: 'Composition', id: 'c1' } }] },
      'composition=Composition/c1',
      true,
    ],
    'reference:canonical': [{ resourceType: 'QuestionnaireResponse', questionnaire: 'Questionnaire/q1' }, 'questionnaire=q1', true],
    'reference:uri': [{ resourceType: 'ConceptMap', sourceUri: 'ValueSet/v1' }, 'source-uri=ValueSet/v1', true],
    'string:Address': [{ resourceType: 'Patient', address: [{ city: 'Paris' }] }, 'address=par', true],
    'string:HumanName': [{ resourceType: 'Patient', name: [{ given: ['Anna'] }] }, 'name=ann', true],
    'string:markdown': [{ resourceType: 'ValueSet', description: 'Codes for x' }, 'description=codes', true],
    'string:string': [{ resourceType: 'Organization', name: 'Acme' }, 'name=ac', true],
    'token:CodeableConcept': [{ resourceType: 'Observation', code: { coding: [{ system: 'http://s', code: 'c' }] } }, 'code=http://s|c', true],
    'token:Coding': [{ resourceType: 'Encounter', class: { system: 'http://s', code: 'AMB' } }, 'class=AMB', true],
    'token:ContactPoint': [{ resourceType: 'Patient', telecom: [{ system: 'email', value: 'a@x.org' }] }, 'email=a@x.org', true],
    'token:Identifier': [{ resourceType: 'Patient', identifier: [{ system: 'http://s', value: '1' }] }, 'identifier=http://s|1', true],
    'token:boolean': [{ resourceType: 'Patient', active: true }, 'active=true', true],
    'token:code': [{ resourceType: 'Appointment', status: 'booked' }, 'status=booked', true],
    'token:http://hl7.org/fhirpath/System.String': [{ resourceType: 'Patient', id: 'p1' }, '_id=p1', true],
    'token:id': [{ resourceType: 'ImagingStudy', series: [{ instance: [{ uid: '1.2.3' }] }] }, 'instance=1.2.3', true],
    'token:string': [{ resourceType: 'ActivityDefinition', version: '2.0' }, 'version=2.0', true],
    'token:uri': [{ resourceType: 'MessageHeader', eventUri: 'http://x.org/e' }, 'event=http://x.org/e', true],
    'uri:?': [
      { resourceType: 'ConceptMap', group: [{ element: [{ target: [{ product: [{ property: 'http://x.org/p' }] }] }] }] },
      'product=http://x.org/p',
      true,
    ],
    'uri:canonical': [{ resourceType: 'Patient', meta: { profile: ['http://x.org/P|2'] } }, '_profile=http://x.org/P', true],
    'uri:uri': [{ resourceType: 'ValueSet', url: 'http://x.org/vs' }, 'url:below=http://x.org/', true],
    'uri:url': [{ resourceType: 'Subscription', channel: { endpoint: 'http://x.org/hook' } }, 'url=http://x.org/hook', true],
  };

  it('has an example for each pair, and no example for a pair that does not exist', () => {
    const pairs = new Set<string>();
    for (const resourceType of resourceTypes) {
      for (const parameter of searchParametersOf(resourceType).values()) {
        if (!isSupported(parameter) || parameter.type === 'composite') continue;
        for (const path of parameter.paths) pairs.add(`${parameter.type}:${(path.at(-1)?.types ?? ['?']).join('/')}`);
      }
    }
    expect([...pairs].sort()).toEqual(Object.keys(examples).sort());
  });

  it.each(Object.entries(examples))('%s: %j', async (_, [resource, query, expected]) => {
    const predicate = compileFilters(parseSearchQuery(resource.resourceType, query).filters);
    const { rows } = await t.database.pool.query<{ matched: boolean }>('SELECT jsonb_path_match($1::jsonb, $2::jsonpath) AS matched', [resource, predicate]);
    expect(rows[0]!.matched, `compiled: ${predicate}`).toBe(expected);
    expect(matchesSearch(resource, resource.resourceType, query), 'oracle').toBe(expected);
  });
});
