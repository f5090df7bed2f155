import { readFileSync } from 'node:fs';
import { verify } from '@octokit/webhooks-methods';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/auth/api-keys.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { minHeartbeatPeriodSeconds } from '../../src/subscriptions/requests.ts';
import { addTopics, retireTopic } from '../../src/topics/store.ts';
import { serviceBase, type TestApp } from '../support/app.ts';
import { childEnvironment, cliEntry, runCommand } from '../support/commands.ts';
import { eventNumbers, notificationProblems, statusValue, type Json } from '../support/backport-conformance.ts';
import { waitFor, type ReceivedCall, type Receiver } from '../support/receiver.ts';
import { untilDelivered, untilStatus } from '../support/subscriptions.ts';
import { backportIg, exampleTopicUrl, startTopicStack, type TopicStack } from '../support/topics.ts';

/**
 * Topic-based subscriptions (Backport IG) end to end: created through the
 * API, triggered by API writes and by plain SQL, notifications received by a
 * real receiver on loopback and checked as a conformance tester would.
 */

let t: TestApp;
let stack: TopicStack;

const topicUrl = exampleTopicUrl;
const ig = backportIg;

beforeAll(async () => {
  stack = await startTopicStack({ DELIVERY_RETRY_DELAYS_MS: '100', DELIVERY_MAX_FAILURES: '3', DELIVERY_RESPONSE_TIMEOUT_MS: '5000' });
  t = stack.t;
});
afterAll(() => stack?.close());

const receiver = () => stack.receiver();

type Options = { content?: string; filters?: string[]; channelExtensions?: unknown[]; criteria?: string; endpoint?: string };

function topicSubscription({
  content = 'id-only',
  filters = [],
  channelExtensions = [],
  criteria = topicUrl,
  endpoint = 'http://127.0.0.1:9/none',
}: Options = {}) {
  return {
    resourceType: 'Subscription',
    status: 'requested',
    reason: 'Encounters that became finished',
    criteria,
    ...(filters.length === 0 ? {} : { _criteria: { extension: filters.map((valueString) => ({ url: `${ig}/backport-filter-criteria`, valueString })) } }),
    channel: {
      ...(channelExtensions.length === 0 ? {} : { extension: channelExtensions }),
      type: 'rest-hook',
      endpoint,
      payload: 'application/fhir+json',
      _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: content }] },
      header: ['secret: topic-secret', 'Authorization: Bearer inferno-token'],
    },
  };
}

async function subscribeToTopic(options: Options): Promise<{ id: string; receiver: Receiver; created: Json }> {
  const endpoint = await receiver();
  const response = await t.fhir('POST', '/Subscription', topicSubscription({ ...options, endpoint: endpoint.url }));
  expect(response.statusCode, response.body).toBe(201);
  const created = response.json<Json>();
  await untilStatus(t, created.id, 'active');
  return { id: created.id, receiver: endpoint, created };
}

const encounter = (id: string, status: string, patient: string) => ({
  resourceType: 'Encounter',
  id,
  status,
  class: { code: 'AMB' },
  subject: { reference: patient },
});

/** The calls after the handshake, once `count` of them have come. */
async function notifications(endpoint: Receiver, count: number): Promise<ReceivedCall[]> {
  await endpoint.waitForCalls(count + 1);
  return endpoint.calls.slice(1);
}

describe('creating a subscription on a topic', () => {
  it('answers 201 with the subscription as stored (its profile and every extension), then hands shake in the IG shape', async () => {
    const {
      id,
      receiver: endpoint,
      created,
    } = await subscribeToTopic({
      filters: ['Encounter?patient=Patient/created'],
      channelExtensions: [
        { url: `${ig}/backport-heartbeat-period`, valueUnsignedInt: 3600 },
        { url: `${ig}/backport-timeout`, valueUnsignedInt: 5 },
        { url: `${ig}/backport-max-count`, valuePositiveInt: 10 },
      ],
    });
    expect(created).toMatchObject({
      meta: { profile: [`${ig}/backport-subscription`] },
      status: 'requested',
      criteria: topicUrl,
      _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: 'Encounter?patient=Patient/created' }] },
      channel: {
        type: 'rest-hook',
        payload: 'application/fhir+json',
        _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'id-only' }] },
        header: ['secret: topic-secret', 'Authorization: Bearer inferno-token'],
      },
    });
    expect(created.channel.extension).toEqual([
      { url: `${ig}/backport-heartbeat-period`, valueUnsignedInt: 3600 },
      { url: `${ig}/backport-timeout`, valueUnsignedInt: 5 },
      { url: `${ig}/backport-max-count`, valuePositiveInt: 10 },
    ]);
    const handshake = endpoint.calls[0]!;
    expect(notificationProblems(handshake.json, { subscriptionId: id, type: 'handshake', status: 'requested', content: 'id-only' })).toEqual([]);
    expect(statusValue(handshake.json, 'events-since-subscription-start')).toBe('0');
    expect(statusValue(handshake.json, 'topic')).toBe(topicUrl);
    expect(handshake.headers['content-type']).toBe('application/fhir+json');
    expect(handshake.headers.authorization).toBe('Bearer inferno-token');
    expect(await verify('topic-secret', handshake.body.toString('utf8'), handshake.headers['x-hub-signature'] as string)).toBe(true);
    // Read back as created.
    const read = (await t.fhir('GET', `/Subscription/${id}`)).json<{ resource: Record<string, unknown> }>().resource;
    expect(read).toMatchObject({
      criteria: topicUrl,
      _criteria: created._criteria,
      channel: { extension: created.channel.extension, _payload: created.channel._payload },
    });
  });

  it.each([
    ['an unknown topic', { criteria: 'http://example.org/topics/unknown' }, 'criteria=http://example.org/topics/unknown is not a topic this service offers'],
    ['an unknown version', { criteria: `${topicUrl}|9.9` }, `criteria=${topicUrl}|9.9 is not a topic this service offers`],
    [
      'a filter the topic does not offer',
      { filters: ['Encounter?status=finished'] },
      "the topic does not offer filtering Encounter by 'status' (its canFilterBy: patient, class)",
    ],
    ['a filter on a type the topic is not about', { filters: ['Patient?name=x'] }, 'the topic is about Encounter, not Patient'],
    ['a modifier the topic does not offer', { filters: ['Encounter?patient:missing=true'] }, 'the topic does not offer the modifier :missing'],
    ['a chain', { filters: ['Encounter?patient.name=x'] }, 'chains and _has are not filters a topic offers'],
    ['a payload content the IG does not define', { content: 'everything' }, 'backport-payload-content must be empty, id-only, full-resource'],
    [
      'a timeout beyond the response budget',
      { channelExtensions: [{ url: `${ig}/backport-timeout`, valueUnsignedInt: 16 }] },
      'backport-timeout is 16 seconds; this service waits at most 15 seconds',
    ],
    [
      'a filter longer than a criteria may be',
      { filters: [`Encounter?${'patient=x&'.repeat(1700)}`] },
      'A backport-filter-criteria is 17,010 characters long; the limit is 16,384',
    ],
    [
      'a max-count of 0',
      { channelExtensions: [{ url: `${ig}/backport-max-count`, valuePositiveInt: 0 }] },
      'backport-max-count must be a positive whole number',
    ],
  ])('refuses %s with a 400 naming it', async (_name, options, reason) => {
    const response = await t.fhir('POST', '/Subscription', topicSubscription(options));
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0].details.text).toContain(reason);
  });

  it('refuses a filter-criteria extension of another FHIR version (what Inferno tries), and filters on a classic criteria', async () => {
    const crossVersion = topicSubscription();
    (crossVersion as Record<string, unknown>)._criteria = {
      extension: [
        { url: 'http://hl7.org/fhir/5.0/subscriptions-backport/StructureDefinition/backport-filter-criteria', valueString: 'Encounter.patient=Patient/123' },
      ],
    };
    const refused = await t.fhir('POST', '/Subscription', crossVersion);
    expect(refused.statusCode).toBe(400);
    expect(refused.json().issue[0].details.text).toContain('_criteria has an extension this service does not support: http://hl7.org/fhir/5.0/');
    const classic = { ...topicSubscription({ filters: ['Encounter?patient=Patient/1'] }), criteria: 'Encounter?status=finished' };
    const classicRefused = await t.fhir('POST', '/Subscription', classic);
    expect(classicRefused.statusCode).toBe(400);
    expect(classicRefused.json().issue[0].details.text).toContain('_criteria (filters on a topic) applies to topic-based subscriptions');
  });

  it('refuses a missing payload content, as the IG requires one', async () => {
    const body = topicSubscription();
    delete (body.channel as Record<string, unknown>)._payload;
    const response = await t.fhir('POST', '/Subscription', body);
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0].details.text).toContain('channel._payload needs a backport-payload-content extension');
  });

  it('allows one live subscription per topic and filters; status off with the same filters switches that one off', async () => {
    const filters = ['Encounter?patient=Patient/unique'];
    const first = await t.fhir('POST', '/Subscription', topicSubscription({ filters }));
    expect(first.statusCode).toBe(201);
    const again = await t.fhir('POST', '/Subscription', topicSubscription({ filters }));
    expect(again.statusCode).toBe(400);
    expect(again.json().issue[0].details.text).toContain(
      `This API key already has a live (requested or active) subscription for topic ${topicUrl} with the filters Encounter?patient=Patient/unique`,
    );
    // Other filters: another subscription.
    expect((await t.fhir('POST', '/Subscription', topicSubscription({ filters: ['Encounter?patient=Patient/other'] }))).statusCode).toBe(201);
    const off = await t.fhir('POST', '/Subscription', { ...topicSubscription({ filters }), status: 'off' });
    expect(off.statusCode).toBe(200);
    expect(off.json()).toMatchObject({ id: first.json().id, status: 'off' });
    expect((await t.fhir('POST', '/Subscription', topicSubscription({ filters }))).statusCode).toBe(201);
  });

  it('is created in a transaction Bundle too, and a refusal there rolls the Bundle back', async () => {
    const entry = (body: unknown) => ({ resource: body, request: { method: 'POST', url: 'Subscription' } });
    const good = await t.fhir('POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [entry(topicSubscription({ filters: ['Encounter?patient=Patient/bundled'] }))],
    });
    expect(good.statusCode, good.body).toBe(200);
    expect(good.json().entry[0]).toMatchObject({
      response: { status: '201 Created' },
      resource: { criteria: topicUrl, channel: { _payload: { extension: [{ valueCode: 'id-only' }] } } },
    });
    const bad = await t.fhir('POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        entry(topicSubscription({ filters: ['Encounter?patient=Patient/bundled-2'] })),
        entry(topicSubscription({ criteria: 'http://example.org/topics/unknown' })),
      ],
    });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().issue[0].details.text).toContain('is not a topic this service offers');
    const { rows } = await t.database.pool.query(`SELECT 1 FROM webhook.subscriptions WHERE filter_criteria = '{Encounter?patient=Patient/bundled-2}'`);
    expect(rows).toEqual([]);
  });

  it('refuses a retired topic, naming it; the subscriptions on it keep their state', async () => {
    await addTopics(t.database.db, [
      { ...JSON.parse(readFileSync(new URL('../../examples/topics/encounter-complete.json', import.meta.url), 'utf8')), version: 'retiring' },
    ]);
    const before = await t.fhir('POST', '/Subscription', topicSubscription({ criteria: `${topicUrl}|retiring` }));
    expect(before.statusCode).toBe(201);
    await retireTopic(t.database.db, `${topicUrl}|retiring`);
    const after = await t.fhir('POST', '/Subscription', topicSubscription({ criteria: `${topicUrl}|retiring`, filters: ['Encounter?patient=Patient/x'] }));
    expect(after.statusCode).toBe(400);
    expect(after.json().issue[0].details.text).toContain(`the topic ${topicUrl}|retiring is retired and takes no new subscriptions`);
    const { rows } = await t.database.pool.query(`SELECT status FROM webhook.subscriptions WHERE id = $1`, [before.json().id]);
    expect(rows[0].status).not.toBe('off');
  });
});

describe.each(['empty', 'id-only', 'full-resource'] as const)('notifications with %s content', (content) => {
  it('an API create and a plain SQL UPDATE into finished notify, numbered 1 and 2; other patients and other changes do not', async () => {
    const patient = `Patient/${content}`;
    await t.fhir('PUT', `/${patient}`, { resourceType: 'Patient', id: content, name: [{ family: content }] });
    const { id, receiver: endpoint } = await subscribeToTopic({ content, filters: [`Encounter?patient=${patient}`] });

    await t.fhir('PUT', `/Encounter/${content}-api`, encounter(`${content}-api`, 'finished', patient));
    await t.fhir('PUT', `/Encounter/${content}-other`, encounter(`${content}-other`, 'finished', 'Patient/someone-else'));
    await t.fhir('PUT', `/Encounter/${content}-sql`, encounter(`${content}-sql`, 'in-progress', patient));
    // A batch loader's plain SQL: the one in progress becomes finished; the finished one stays so (no change, no event).
    await t.database.pool.query(
      `UPDATE fhir.resources SET content = jsonb_set(content, '{status}', '"finished"') WHERE resource_type = 'Encounter' AND id LIKE $1`,
      [`${content}-%`],
    );

    // One call at a time, in event-number order (test/dispatch/topic-event-order.test.ts).
    const [first, second] = await notifications(endpoint, 2);
    for (const call of [first!, second!]) {
      expect(notificationProblems(call.json, { subscriptionId: id, type: 'event-notification', status: 'active', content })).toEqual([]);
      expect(await verify('topic-secret', call.body.toString('utf8'), call.headers['x-hub-signature'] as string)).toBe(true);
    }
    expect([eventNumbers(first!.json), eventNumbers(second!.json)]).toEqual([[1], [2]]);
    expect([statusValue(first!.json, 'events-since-subscription-start'), statusValue(second!.json, 'events-since-subscription-start')]).toEqual(['1', '2']);
    const entries = (call: ReceivedCall) => (call.json.entry as Json[]).slice(1);
    if (content === 'empty') {
      expect(entries(first!)).toEqual([]);
    } else {
      const focus = (call: ReceivedCall) => entries(call)[0]!;
      expect(focus(first!)).toMatchObject({
        fullUrl: `${serviceBase}/Encounter/${content}-api`,
        request: { method: 'POST', url: 'Encounter' },
        response: { status: '201' },
      });
      expect(focus(second!)).toMatchObject({
        fullUrl: `${serviceBase}/Encounter/${content}-sql`,
        request: { method: 'PUT', url: `Encounter/${content}-sql` },
        response: { status: '200', etag: 'W/"2"' },
      });
      if (content === 'id-only') {
        expect(entries(first!)).toHaveLength(1);
      } else {
        expect(focus(second!).resource).toMatchObject({ resourceType: 'Encounter', id: `${content}-sql`, status: 'finished', meta: { versionId: '2' } });
        // The notification shape's include: the patient, as additional context.
        expect(entries(second!).map((entry) => entry.fullUrl)).toEqual([`${serviceBase}/Encounter/${content}-sql`, `${serviceBase}/${patient}`]);
        expect(entries(second!)[1]!.resource).toMatchObject({ resourceType: 'Patient', id: content });
      }
    }
    // Nothing more: the other patient's Encounter and the unchanged one were not events.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(endpoint.calls).toHaveLength(3);
  });
});

describe('event numbers', () => {
  it('are kept by a retry: a receiver that fails an event gets it again with the same number, and the next one after it', async () => {
    const { receiver: endpoint } = await subscribeToTopic({ filters: ['Encounter?patient=Patient/retried'] });
    // Its first notification fails; a retry comes 100 ms later (DELIVERY_RETRY_DELAYS_MS), with jitter.
    let failures = 1;
    endpoint.answer = () => (failures-- > 0 ? { status: 503 } : { status: 200 });
    await t.fhir('PUT', '/Encounter/retried-1', encounter('retried-1', 'finished', 'Patient/retried'));
    await notifications(endpoint, 1);
    // The next event, written while the first waits for its retry, waits behind it.
    await t.fhir('PUT', '/Encounter/retried-2', encounter('retried-2', 'finished', 'Patient/retried'));
    const calls = await notifications(endpoint, 3);
    expect(calls.map((call) => eventNumbers(call.json))).toEqual([[1], [1], [2]]);
  });

  it('max-count holds: three events of one statement come as three notifications of one event each', async () => {
    const { receiver: endpoint } = await subscribeToTopic({
      filters: ['Encounter?patient=Patient/max-count'],
      channelExtensions: [{ url: `${ig}/backport-max-count`, valuePositiveInt: 1 }],
    });
    await t.database.pool.query(
      `INSERT INTO fhir.resources (content) SELECT jsonb_build_object('resourceType', 'Encounter', 'id', 'max-count-' || n, 'status', 'finished', 'subject', jsonb_build_object('reference', 'Patient/max-count')) FROM generate_series(1, 3) n`,
    );
    const calls = await notifications(endpoint, 3);
    expect(calls.map((call) => eventNumbers(call.json).length)).toEqual([1, 1, 1]);
    expect(calls.flatMap((call) => eventNumbers(call.json)).sort()).toEqual([1, 2, 3]);
  });

  it('a deletion that the topic fires on comes as a DELETE entry without a resource', async () => {
    await addTopics(t.database.db, [
      {
        resourceType: 'SubscriptionTopic',
        url: 'http://example.org/topics/encounter-removed',
        status: 'active',
        resourceTrigger: [{ resource: 'Encounter', supportedInteraction: ['delete'] }],
        canFilterBy: [{ filterParameter: 'patient' }],
      },
    ]);
    const { id, receiver: endpoint } = await subscribeToTopic({
      criteria: 'http://example.org/topics/encounter-removed',
      content: 'full-resource',
      filters: ['Encounter?patient=Patient/removed'],
    });
    await t.fhir('PUT', '/Encounter/removed', encounter('removed', 'cancelled', 'Patient/removed'));
    await t.fhir('DELETE', '/Encounter/removed');
    const [call] = await notifications(endpoint, 1);
    // A deleted resource has no content to carry: its entry is as id-only's, which is what the IG allows when a resource cannot be included.
    expect(notificationProblems(call!.json, { subscriptionId: id, type: 'event-notification', status: 'active', content: 'id-only' })).toEqual([]);
    expect((call!.json.entry as unknown[])[1]).toEqual({
      fullUrl: `${serviceBase}/Encounter/removed`,
      request: { method: 'DELETE', url: 'Encounter/removed' },
      response: { status: '204' },
    });
    await untilDelivered(t, id, 1, 5000);
  });
});

describe('a subscription in error', () => {
  it('has its events numbered all the same; its next event reactivates it, and the subscriber sees the gap and fetches it with $events', async () => {
    const { id, receiver: endpoint } = await subscribeToTopic({ filters: ['Encounter?patient=Patient/error'] });
    await t.fhir('PUT', '/Encounter/error-1', encounter('error-1', 'finished', 'Patient/error'));
    await notifications(endpoint, 1);
    // Deactivated (as after repeated failures): its next events are missed.
    await t.database.pool.query(`UPDATE webhook.subscriptions SET status = 'error', error = 'HTTP 503 from the receiver' WHERE id = $1`, [id]);
    // Two events in one statement (a loader's): numbered 2 and 3, the first reactivating it.
    await t.database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2)`, [
      encounter('error-2', 'finished', 'Patient/error'),
      encounter('error-3', 'finished', 'Patient/error'),
    ]);
    await untilStatus(t, id, 'active');
    await t.fhir('PUT', '/Encounter/error-4', encounter('error-4', 'finished', 'Patient/error'));
    // The first notification, the reactivation handshake, the event that reactivated it, and the one after.
    const calls = await endpoint.waitForCalls(5);
    expect(notificationProblems(calls[2]!.json, { subscriptionId: id, type: 'handshake', content: 'id-only' })).toEqual([]);
    // The reactivation handshake counts the events so far, the missed ones numbered.
    expect(statusValue(calls[2]!.json, 'events-since-subscription-start')).toBe('3');
    const received = [calls[1]!, calls[3]!, calls[4]!].map((call) => eventNumbers(call.json)[0]!);
    // The reactivating event kept the number it got while the subscription was in error; 3 was missed.
    expect(received.sort((a, b) => a - b)).toEqual([1, 2, 4]);
    const fetched = (await t.fhir('GET', `/Subscription/${id}/$events?eventsSinceNumber=3&eventsUntilNumber=3`)).json<Json>();
    expect(eventNumbers(fetched)).toEqual([3]);
    expect(fetched.entry.slice(1).map((entry: Json) => entry.fullUrl)).toEqual([`${serviceBase}/Encounter/error-3`]);
  });
});

describe('heartbeats', () => {
  it('go when no call went for the heartbeat period, in the IG shape, recorded as calls; none without a period', { timeout: 30_000 }, async () => {
    const period = minHeartbeatPeriodSeconds;
    const { id, receiver: endpoint } = await subscribeToTopic({
      filters: ['Encounter?patient=Patient/heartbeat'],
      channelExtensions: [{ url: `${ig}/backport-heartbeat-period`, valueUnsignedInt: period }],
    });
    const { receiver: quiet } = await subscribeToTopic({ filters: ['Encounter?patient=Patient/quiet'] });
    const [, heartbeat] = await endpoint.waitForCalls(2, (period + 5) * 1000);
    expect(notificationProblems(heartbeat!.json, { subscriptionId: id, type: 'heartbeat', status: 'active', content: 'id-only' })).toEqual([]);
    expect(statusValue(heartbeat!.json, 'events-since-subscription-start')).toBe('0');
    expect(await verify('topic-secret', heartbeat!.body.toString('utf8'), heartbeat!.headers['x-hub-signature'] as string)).toBe(true);
    // Recorded once the receiver's answer is read, a period after the handshake.
    const [recorded] = await waitFor(
      async () => {
        const { rows } = await t.database.pool.query(
          `SELECT outcome, extract(epoch FROM started_at - lag(started_at) OVER (ORDER BY started_at)) AS after_previous, kind
         FROM webhook.delivery_attempts WHERE subscription_id = $1 ORDER BY started_at`,
          [id],
        );
        const heartbeats = rows.filter((row) => row.kind === 'heartbeat');
        return heartbeats.length > 0 ? heartbeats : undefined;
      },
      5000,
      'a heartbeat recorded',
    );
    expect(recorded).toMatchObject({ outcome: 'delivered' });
    expect(Number(recorded.after_previous)).toBeGreaterThanOrEqual(period - 0.1);
    expect(quiet.calls).toHaveLength(1);
  });

  it(`refuses a heartbeat period under ${minHeartbeatPeriodSeconds} seconds`, async () => {
    const response = await t.fhir(
      'POST',
      '/Subscription',
      topicSubscription({ channelExtensions: [{ url: `${ig}/backport-heartbeat-period`, valueUnsignedInt: minHeartbeatPeriodSeconds - 1 }] }),
    );
    expect(response.statusCode).toBe(400);
    expect(response.json().issue[0].details.text).toContain(
      `backport-heartbeat-period must be a whole number of seconds, at least ${minHeartbeatPeriodSeconds}`,
    );
  });
});

describe('$status, $events and discovery', () => {
  it('a receiver that missed an event sees the gap in the numbers and gets it with $events; events no longer held are said so', async () => {
    const { id, receiver: endpoint } = await subscribeToTopic({ content: 'full-resource', filters: ['Encounter?patient=Patient/gap'] });
    // The receiver refuses the second event for good (a 400): it is not sent again.
    endpoint.answer = (call) => ({ status: eventNumbers(call.json).includes(2) ? 400 : 200 });
    for (const n of [1, 2, 3]) await t.fhir('PUT', `/Encounter/gap-${n}`, encounter(`gap-${n}`, 'finished', 'Patient/gap'));
    const calls = await notifications(endpoint, 3);
    const received = calls.filter((_call, index) => index !== 1).map((call) => eventNumbers(call.json)[0]);
    expect(received).toEqual([1, 3]);

    const missed = await t.fhir('GET', `/Subscription/${id}/$events?eventsSinceNumber=2&eventsUntilNumber=2`);
    expect(missed.statusCode).toBe(200);
    const events = missed.json<Json>();
    expect(notificationProblems(events, { subscriptionId: id, type: 'query-event', content: 'full-resource' })).toEqual([]);
    expect(eventNumbers(events)).toEqual([2]);
    expect(statusValue(events, 'events-since-subscription-start')).toBe('3');
    expect(events.entry[1].resource).toMatchObject({ resourceType: 'Encounter', id: 'gap-2' });

    // As id-only, on request.
    const idOnly = (await t.fhir('GET', `/Subscription/${id}/$events?content=id-only`)).json<Json>();
    expect(notificationProblems(idOnly, { subscriptionId: id, type: 'query-event', content: 'id-only' })).toEqual([]);
    expect(eventNumbers(idOnly)).toEqual([1, 2, 3]);

    // A second event of one resource (finished again) is a second entry: another version.
    await t.fhir('PUT', '/Encounter/gap-1', encounter('gap-1', 'in-progress', 'Patient/gap'));
    await t.fhir('PUT', '/Encounter/gap-1', encounter('gap-1', 'finished', 'Patient/gap'));
    await notifications(endpoint, 4);
    const again = (await t.fhir('GET', `/Subscription/${id}/$events?eventsSinceNumber=1&eventsUntilNumber=4`)).json<Json>();
    expect(notificationProblems(again, { subscriptionId: id, type: 'query-event', content: 'full-resource' })).toEqual([]);
    const foci = again.entry.slice(1).filter((entry: Json) => entry.resource?.resourceType === 'Encounter');
    expect(foci.map((entry: Json) => [entry.resource.id, entry.resource.meta.versionId])).toEqual([
      ['gap-1', '1'],
      ['gap-2', '1'],
      ['gap-3', '1'],
      ['gap-1', '3'],
    ]);

    // The log's retention removed the first event: asked for by number, it is said to be gone.
    await t.database.pool.query(`DELETE FROM webhook.subscription_events WHERE subscription_id = $1 AND event_number = 1`, [id]);
    const purged = (await t.fhir('GET', `/Subscription/${id}/$events?eventsSinceNumber=1`)).json<Json>();
    expect(eventNumbers(purged)).toEqual([2, 3, 4]);
    expect(purged.entry.at(-1).resource).toMatchObject({
      resourceType: 'OperationOutcome',
      issue: [{ details: { text: expect.stringContaining('Events 1 are no longer held') } }],
    });
  });

  it('$status answers a searchset Bundle of status Parameters, at instance and type level, for the subscriptions the key may see', async () => {
    const { id } = await subscribeToTopic({ filters: ['Encounter?patient=Patient/status'] });
    await t.fhir('PUT', '/Encounter/status-1', encounter('status-1', 'finished', 'Patient/status'));
    await untilDelivered(t, id, 1, 5000);
    const instance = await t.fhir('GET', `/Subscription/${id}/$status`);
    expect(instance.statusCode).toBe(200);
    const bundle = instance.json<Json>();
    expect(bundle).toMatchObject({ resourceType: 'Bundle', type: 'searchset', total: 1 });
    const status = {
      entry: [{ ...bundle.entry[0], request: { method: 'GET', url: `Subscription/${id}/$status` }, response: { status: '200' } }],
      resourceType: 'Bundle',
      type: 'history',
    };
    expect(notificationProblems(status, { subscriptionId: id, type: 'query-status', status: 'active', content: 'id-only' })).toEqual([]);
    expect(statusValue(status, 'events-since-subscription-start')).toBe('1');

    const typeLevel = (await t.fhir('GET', `/Subscription/$status?id=${id}&status=active`)).json<Json>();
    expect(typeLevel.entry.map((entry: Json) => entry.resource.parameter[0].valueReference.reference)).toEqual([`${serviceBase}/Subscription/${id}`]);
    expect((await t.fhir('GET', `/Subscription/$status?id=${id}&status=off`)).json<Json>().total).toBe(0);
    expect((await t.fhir('GET', '/Subscription/$status?status=active')).json<Json>().total).toBeGreaterThanOrEqual(1);

    // Another key without the admin scope does not see it.
    const { key } = await createApiKey(t.database.db, 'other', ['read', 'write']);
    expect((await t.fhir('GET', `/Subscription/${id}/$status`, undefined, { 'x-api-key': key })).statusCode).toBe(404);
    expect((await t.fhir('GET', `/Subscription/$status?id=${id}`, undefined, { 'x-api-key': key })).json<Json>().total).toBe(0);
    // A classic subscription has no topic status.
    const classic = await t.fhir('POST', '/Subscription', {
      ...topicSubscription(),
      criteria: 'Encounter?status=finished',
      channel: { type: 'rest-hook', endpoint: 'http://127.0.0.1:9/none', payload: 'application/fhir+json' },
    });
    const refused = await t.fhir('GET', `/Subscription/${classic.json().id}/$events`);
    expect(refused.statusCode).toBe(400);
    expect(refused.json().issue[0].details.text).toContain('is not on a topic');
    expect((await t.fhir('GET', `/Subscription/${id}/$events?eventsSinceNumber=two`)).statusCode).toBe(400);
  });

  it('the CapabilityStatement names every active topic and the IG profile and operations; the topics can be read', async () => {
    const statement = (await t.fhir('GET', '/metadata')).json<Json>();
    const subscription = statement.rest[0].resource.find((entry: Json) => entry.type === 'Subscription');
    const topics = subscription.extension.filter(
      (item: Json) => item.url === 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition/capabilitystatement-subscriptiontopic-canonical',
    );
    expect(topics.map((item: Json) => item.valueCanonical)).toEqual(expect.arrayContaining([topicUrl, `${topicUrl}|1.0.0`]));
    // Retired: no longer offered.
    expect(topics.map((item: Json) => item.valueCanonical)).not.toContain(`${topicUrl}|retiring`);
    expect(subscription.supportedProfile).toEqual([`${ig}/backport-subscription`]);
    expect(subscription.operation.map((operation: Json) => operation.name)).toEqual(expect.arrayContaining(['status', 'events', 'get-ws-binding-token']));
    // What a topic's trigger may say: R4 has no element for it, so the entry's documentation does.
    expect(subscription.documentation).toContain('fhirPathCriteria is compiled to SQL for this FHIRPath subset');

    // R4 has no SubscriptionTopic: each is the IG's Basic, its version and status in extensions (test/topics/topics.test.ts has the whole shape).
    const search = (await t.fhir('GET', `/SubscriptionTopic?url=${encodeURIComponent(topicUrl)}`)).json<Json>();
    const versionAndStatus = (basic: Json) => [
      basic.extension.find((item: Json) => item.url === 'http://hl7.org/fhir/5.0/StructureDefinition/extension-SubscriptionTopic.version')?.valueString,
      basic.modifierExtension.find((item: Json) => item.url === 'http://hl7.org/fhir/StructureDefinition/artifact-status')?.valueCode,
    ];
    expect(search.entry.map((entry: Json) => versionAndStatus(entry.resource))).toEqual(
      expect.arrayContaining([
        ['1.0.0', 'active'],
        ['retiring', 'retired'],
      ]),
    );
    const read = await t.fhir('GET', new URL(search.entry[0].fullUrl).pathname.replace('/fhir/resources', ''));
    expect(read.json()).toMatchObject({ resourceType: 'Basic', code: { coding: [{ system: 'http://hl7.org/fhir/fhir-types', code: 'SubscriptionTopic' }] } });
    expect(read.json().extension).toContainEqual({ url: 'http://hl7.org/fhir/StructureDefinition/artifact-url', valueUri: topicUrl });
    expect((await t.fhir('GET', '/SubscriptionTopic/999999')).statusCode).toBe(404);
  });
});

describe('what operators see', () => {
  it('subscriptions list and show, the DBA view and the metrics name the topic, the filters, the payload level and the latest event number', async () => {
    const { id } = await subscribeToTopic({ content: 'empty', filters: ['Encounter?patient=Patient/operators'] });
    await t.fhir('PUT', '/Encounter/operators-1', encounter('operators-1', 'finished', 'Patient/operators'));
    await untilDelivered(t, id, 1, 5000);

    const environment = childEnvironment({ DATABASE_URL: t.database.url, LOG_LEVEL: 'warn' });
    const show = await runCommand(process.execPath, [cliEntry, 'subscriptions', 'show', id], environment);
    expect(show.exitCode).toBe(0);
    expect(show.output).toContain(
      `  criteria  ${topicUrl}\n  filters   Encounter?patient=Patient/operators\n  payload   empty\n  events    1 (the latest event's number)\n`,
    );
    const list = await runCommand(process.execPath, [cliEntry, 'subscriptions', 'list', '--status', 'active'], environment);
    expect(list.output).toMatch(
      new RegExp(`${id}\\s+active\\s+0\\s+0\\s+\\S+Z\\s+${topicUrl.replace(/[.?]/g, '\\$&')} \\[Encounter\\?patient=Patient/operators\\] \\(empty\\)`),
    );

    const { rows } = await t.database.pool.query(
      `SELECT topic_url, topic_version, filter_criteria, payload_content, last_event_number FROM webhook.topic_subscriptions WHERE subscription_id = $1`,
      [id],
    );
    expect(rows).toEqual([
      {
        topic_url: topicUrl,
        topic_version: '1.0.0',
        filter_criteria: ['Encounter?patient=Patient/operators'],
        payload_content: 'empty',
        last_event_number: '1',
      },
    ]);

    const exposition = await createMetrics(t.database.db).registry.metrics();
    expect(exposition).toMatch(
      new RegExp(`fhir_webhooks_topic_subscriptions\\{topic="${topicUrl.replace(/[.?|]/g, '\\$&')}\\|1\\.0\\.0",status="active"\\} \\d+`),
    );
  });
});
