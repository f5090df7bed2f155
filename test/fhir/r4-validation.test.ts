import { describe, expect, it } from 'vitest';
import { checkAnswer, r4Findings, r4Problems, type Answer } from '../support/r4-validation.ts';

/**
 * The check every answer and notification of the suite goes through
 * (test/support/validate-answers.ts) can fail: each kind of defect it is
 * there for gives a problem, and a valid resource gives none.
 */
describe("the R4 check of the suite's bodies", () => {
  const patient = { resourceType: 'Patient', id: 'p1', active: true, name: [{ family: 'Chalmers', given: ['Peter'] }], birthDate: '1974-12-25' };

  it('finds nothing wrong with a valid Patient, nor with a refusal as the specification words it', () => {
    expect(r4Problems(patient)).toEqual([]);
    expect(
      r4Problems({
        resourceType: 'OperationOutcome',
        issue: [{ severity: 'error', code: 'exception', details: { text: "ValidationError: ['Only channel=rest-hook subscriptions are supported']" } }],
      }),
    ).toEqual([]);
  });

  it('finds an empty array, an empty object and an empty string, by path', () => {
    expect(r4Problems({ ...patient, name: [] })).toEqual(['$.name: empty array []']);
    expect(r4Problems({ ...patient, meta: {} })).toEqual(['$.meta: empty object {}']);
    expect(r4Problems({ ...patient, name: [{ family: '', given: ['Peter'] }] })).toEqual(['$.name[0].family: empty string ""']);
    expect(r4Problems({ resourceType: 'Bundle', type: 'collection', entry: [{ resource: { ...patient, identifier: [] } }] })).toEqual([
      '$.entry[0].resource.identifier: empty array []',
    ]);
  });

  it("finds a resource type that is not R4 4.0.1, even one Medplum knows (R4B's SubscriptionStatus)", () => {
    expect(r4Problems({ resourceType: 'SubscriptionTopic', url: 'http://example.org/topic', status: 'active' })).toContain(
      '$: resourceType "SubscriptionTopic" is not an R4 (4.0.1) resource type',
    );
    const status = { resourceType: 'SubscriptionStatus', status: 'active', type: 'handshake', subscription: { reference: 'Subscription/1' } };
    expect(r4Problems(status)).toEqual(['$: resourceType "SubscriptionStatus" is not an R4 (4.0.1) resource type']);
    expect(r4Problems({ resourceType: 'Bundle', type: 'collection', entry: [{ resource: status }] })).toEqual([
      '$.entry[0].resource: resourceType "SubscriptionStatus" is not an R4 (4.0.1) resource type',
    ]);
  });

  it('finds an unknown element, a wrong JSON type, a bad format, a missing element and a broken invariant (Medplum)', () => {
    expect(r4Problems({ ...patient, colour: 'blue' })).toEqual(['$.colour: Invalid additional property "colour"']);
    expect(r4Problems({ ...patient, active: 'yes' })).toEqual(['$.active: Invalid JSON type: expected boolean, but got string']);
    expect(r4Problems({ ...patient, birthDate: '25/12/1974' })).toEqual(['$.birthDate: Invalid date format']);
    expect(r4Problems({ ...patient, gender: null })).toEqual(['$.gender: Invalid null value']);
    expect(r4Problems({ resourceType: 'Observation', status: 'final' })).toEqual(['$.code: Missing required property']);
    expect(r4Problems({ resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: 'urn:uuid:1', resource: patient }] })).toEqual([
      expect.stringContaining('Constraint bdl-3 not met: entry.request mandatory for batch/transaction/history'),
    ]);
    expect(r4Problems({ resourceType: 'Bundle', type: 'collection', entry: [{ resource: { ...patient, gender: 7 } }] })).toEqual([
      '$.entry[0].resource.gender: Invalid JSON type: expected string, but got number',
    ]);
  });

  it('says when a body is not a resource, or not JSON', () => {
    expect(r4Problems([patient])).toEqual(['$: not a FHIR resource (no resourceType)']);
    const answer: Answer = {
      source: 'api',
      method: 'GET',
      url: '/fhir/resources/Patient/p1',
      status: 200,
      contentType: 'application/fhir+json',
      body: '{"resourceType":',
    };
    expect(checkAnswer(answer).problems).toEqual([expect.stringMatching(/^not JSON: /)]);
    expect(checkAnswer({ ...answer, contentType: 'text/plain', body: 'ok' }).problems).toEqual(['not FHIR JSON: content-type text/plain']);
    expect(checkAnswer({ ...answer, status: 204, body: '' }).problems).toEqual([]);
  });

  describe('the shapes the specification mandates, and only those', () => {
    const subscription = {
      resourceType: 'Subscription',
      id: 's1',
      status: 'active',
      reason: '-',
      criteria: 'Patient',
      channel: { type: 'rest-hook', endpoint: 'https://example.org/hook', payload: 'application/fhir+json' },
    };
    const api = (method: string, url: string, body: unknown): Answer => ({
      source: 'api',
      method,
      url,
      status: 200,
      contentType: 'application/fhir+json',
      body: JSON.stringify(body),
    });

    it('the read envelope of GET /Subscription/{id}: its resource is checked', () => {
      const envelope = { fullUrl: 'http://fhir.test/fhir/resources/Subscription/s1', resource: subscription, search: { mode: 'match' } };
      expect(checkAnswer(api('GET', '/fhir/resources/Subscription/s1', envelope))).toEqual({
        problems: [],
        stored: [],
        warnings: [],
        exemption: 'Subscription read envelope',
      });
      expect(
        checkAnswer(
          api('GET', '/fhir/resources/Subscription/s1', { ...envelope, resource: { ...subscription, channel: { ...subscription.channel, header: [] } } }),
        ).problems,
      ).toEqual(['$.resource.channel.header: empty array []']);
      // Anywhere else, the same envelope is not a resource.
      expect(checkAnswer(api('GET', '/fhir/resources/Patient/p1', envelope)).problems).toEqual(['$: not a FHIR resource (no resourceType)']);
    });

    it("the Subscription search's empty link and entry, and no other empty array", () => {
      const bundle = {
        resourceType: 'Bundle',
        type: 'searchset',
        link: [],
        entry: [{ fullUrl: 'http://fhir.test/fhir/resources/Subscription/s1', resource: subscription, search: { mode: 'match' } }],
      };
      expect(checkAnswer(api('GET', '/fhir/resources/Subscription?_count=1', bundle)).problems).toEqual([]);
      expect(checkAnswer(api('GET', '/fhir/resources/Subscription', { ...bundle, entry: [] })).problems).toEqual([]);
      expect(checkAnswer(api('GET', '/fhir/resources/Patient', bundle)).problems).toEqual(['$.link: empty array []']);
      expect(checkAnswer(api('GET', '/fhir/resources/Patient', { ...bundle, link: undefined, entry: [] })).problems).toEqual(['$.entry: empty array []']);
      // Inside the exempt Bundle, an empty array elsewhere is still one.
      expect(
        checkAnswer(api('GET', '/fhir/resources/Subscription', { ...bundle, entry: [{ ...bundle.entry[0], resource: { ...subscription, contact: [] } }] }))
          .problems,
      ).toEqual(['$.entry[0].resource.contact: empty array []']);
    });

    it("the classic handshake's SubscriptionStatus, in a history Bundle that is otherwise R4", () => {
      const status = {
        resourceType: 'SubscriptionStatus',
        status: 'requested',
        type: 'handshake',
        subscription: { reference: 'http://fhir.test/fhir/resources/Subscription/s1' },
      };
      const entry = {
        fullUrl: 'urn:uuid:0b8a1f4e-2f3c-4c1e-9d0a-6f1e2b3c4d5e',
        resource: status,
        request: { method: 'GET', url: 'Subscription/s1/$status' },
        response: { status: '200' },
      };
      const handshake = { resourceType: 'Bundle', type: 'history', entry: [entry] };
      const notification = (body: unknown): Answer => ({
        source: 'notification',
        method: 'POST',
        url: 'http://127.0.0.1/hook',
        status: 200,
        contentType: 'application/fhir+json',
        body: JSON.stringify(body),
      });
      expect(checkAnswer(notification(handshake)).problems).toEqual([]);
      expect(checkAnswer(notification({ ...handshake, entry: [{ ...entry, request: undefined }] })).problems).toEqual([
        expect.stringContaining('Constraint bdl-3 not met'),
      ]);
      expect(checkAnswer(notification({ ...handshake, entry: [{ ...entry, resource: { ...status, subscription: undefined } }] })).problems).toEqual([
        '$.entry[0].resource.subscription: Missing required property',
      ]);
      // An answer of the API is no handshake.
      expect(checkAnswer(api('GET', '/fhir/resources/Subscription/s1/$status', handshake)).problems).toEqual([
        '$.entry[0].resource: resourceType "SubscriptionStatus" is not an R4 (4.0.1) resource type',
      ]);
    });
  });

  describe('who answers for an error', () => {
    const api = (body: unknown): Answer => ({
      source: 'api',
      method: 'GET',
      url: '/fhir/resources/Appointment',
      status: 200,
      contentType: 'application/fhir+json',
      body: JSON.stringify(body),
    });
    const meta = { versionId: '1', lastUpdated: '2026-01-01T00:00:00.000001Z' };
    const written = { resourceType: 'Appointment', id: 'a1', meta, status: 'booked', participant: [] };

    it("the content of a stored version is its writer's, its meta the service's", () => {
      expect(checkAnswer(api(written))).toEqual({
        problems: [],
        stored: [
          '$.participant: empty array []',
          '$: Constraint app-3 not met: Only proposed or cancelled appointments can be missing start/end dates',
          '$.participant: Missing required property',
        ],
        warnings: [],
      });
      const bundle = {
        resourceType: 'Bundle',
        type: 'searchset',
        entry: [{ resource: { ...written, meta: { ...meta, tag: [] } }, search: { mode: 'match' } }],
        link: [],
      };
      const { problems, stored } = checkAnswer(api(bundle));
      expect(problems).toEqual(['$.entry[0].resource.meta.tag: empty array []', '$.link: empty array []']);
      expect(stored).toContain('$.entry[0].resource.participant: empty array []');
    });

    it("a Subscription is the service's, stored or not", () => {
      const subscription = {
        resourceType: 'Subscription',
        id: 's1',
        meta,
        status: 'active',
        reason: '-',
        criteria: 'Patient',
        channel: { type: 'rest-hook', header: [] },
      };
      expect(checkAnswer(api(subscription)).problems).toEqual(['$.channel.header: empty array []']);
    });

    it('a resource tagged SUBSETTED may lack what R4 requires, and nothing else', () => {
      const tag = [{ system: 'http://terminology.hl7.org/CodeSystem/v3-ObservationValue', code: 'SUBSETTED' }];
      const subset = { resourceType: 'Observation', meta: { tag }, status: 'final' };
      expect(checkAnswer(api(subset))).toEqual({ problems: [], stored: [], warnings: [] });
      expect(checkAnswer(api({ ...subset, colour: 'blue' })).problems).toEqual(['$.colour: Invalid additional property "colour"']);
    });
  });

  it('keeps its warnings apart from its errors', () => {
    const { errors, warnings } = r4Findings({ ...patient, deceasedBoolean: true, deceasedDateTime: '2020-01-01' });
    expect(errors).toEqual([]);
    expect(warnings).toEqual([expect.objectContaining({ message: expect.stringContaining('Conflicting choice of type properties') })]);
  });
});
