import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { verify } from '@octokit/webhooks-methods';
import type { Browser } from 'playwright-core';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/auth/api-keys.ts';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { addTopics } from '../../src/topics/store.ts';
import { baseUrl, serviceBase, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { eventNumbers, notificationProblems, statusValue, type Json } from '../support/backport-conformance.ts';
import { childEnvironment, cliEntry, runCommand } from '../support/commands.ts';
import { startReceiver, waitFor, type ReceivedCall, type Receiver } from '../support/receiver.ts';
import { chromiumMissing, launchChromium } from '../support/chromium.ts';
import { attemptsOf, statusOf, subscribe, untilStatus } from '../support/subscriptions.ts';

/**
 * Reactivation on an operator's request (issue 27): POST
 * …/Subscription/{id}/$reactivate, `subscriptions reactivate ID` and the
 * console's Reactivate button send a subscription in error its reactivation
 * handshake now, against real receivers on loopback, with the workers
 * running the event-driven path beside it.
 */

// One failed call puts a subscription in error: no retries to wait for.
const config = loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_MAX_FAILURES: '1', DELIVERY_RESPONSE_TIMEOUT_MS: '5000' });

let t: TestApp;
let workers: Workers;
const receivers: Receiver[] = [];

beforeAll(async () => {
  t = await startTestApp({ outbound: { delivery: config.delivery, oauth: undefined, metrics: createMetrics() } });
  workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
  await addTopics(t.database.db, [JSON.parse(readFileSync(new URL('../../examples/topics/encounter-complete.json', import.meta.url), 'utf8'))]);
});
afterAll(async () => {
  await workers?.stop();
  await Promise.all(receivers.map((receiver) => receiver.close()));
  await t?.close();
});

async function receiver(): Promise<Receiver> {
  const started = await startReceiver();
  receivers.push(started);
  return started;
}

const patient = async (family: string) => (await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family }] })).json<{ id: string }>();
const reactivate = (id: string, headers: Record<string, string> = {}) => t.fhir('POST', `/Subscription/${id}/$reactivate`, undefined, headers);
const isHandshake = (call: ReceivedCall) => call.json.resourceType === 'Bundle' && call.json.type === 'history';
/** How many times in a row it went to error without a delivery, and until when events leave it there (migration 0025). */
const backoffOf = async (id: string) =>
  (
    await t.database.pool.query<{ deactivations: number; notBefore: Date | null }>(
      'SELECT deactivations_in_a_row AS deactivations, reactivation_not_before AS "notBefore" FROM webhook.subscriptions WHERE id = $1',
      [id],
    )
  ).rows[0]!;
const holdEventsBack = (id: string) =>
  t.database.pool.query(`UPDATE webhook.subscriptions SET reactivation_not_before = now() + interval '1 hour' WHERE id = $1`, [id]);

/**
 * A topic-based subscription (id-only) on the encounters of Patient/`patientId`, to `endpoint`, active;
 * `finished` writes one of that patient's encounters as finished (an event for it).
 */
async function encountersOf(patientId: string, endpoint: Receiver): Promise<{ id: string; finished: (encounter: string) => Promise<unknown> }> {
  const ig = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';
  const created = await t.fhir('POST', '/Subscription', {
    resourceType: 'Subscription',
    status: 'requested',
    reason: 'Encounters that became finished',
    criteria: 'http://example.org/topics/encounter-complete',
    _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: `Encounter?patient=Patient/${patientId}` }] },
    channel: {
      type: 'rest-hook',
      endpoint: endpoint.url,
      payload: 'application/fhir+json',
      _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'id-only' }] },
    },
  });
  expect(created.statusCode, created.body).toBe(201);
  const { id } = created.json<{ id: string }>();
  await untilStatus(t, id, 'active');
  const finished = (encounter: string) =>
    t.fhir('PUT', `/Encounter/${encounter}`, {
      resourceType: 'Encounter',
      id: encounter,
      status: 'finished',
      class: { code: 'AMB' },
      subject: { reference: `Patient/${patientId}` },
    });
  return { id, finished };
}

/** A subscription on Patient?family=`family` put in error the usual way: active, then its receiver answered 503 to an event. The receiver still answers 503. */
async function inError(family: string, options: { headers?: Record<string, string> } = {}): Promise<{ id: string; endpoint: Receiver }> {
  const endpoint = await receiver();
  const response = await t.fhir(
    'POST',
    '/Subscription',
    {
      resourceType: 'Subscription',
      status: 'requested',
      criteria: `Patient?family=${family}`,
      reason: 'test',
      channel: { type: 'rest-hook', endpoint: endpoint.url, header: ['secret: top-secret'] },
    },
    options.headers,
  );
  expect(response.statusCode, response.body).toBe(201);
  const { id } = response.json<{ id: string }>();
  await untilStatus(t, id, 'active');
  endpoint.answer = () => ({ status: 503 });
  await patient(family);
  await untilStatus(t, id, 'error');
  return { id, endpoint };
}

describe('POST /Subscription/{id}/$reactivate', () => {
  it("sends the handshake now, not held by the backoff; on 2xx the subscription is active as after an event, the handshake recorded as an event's, and the event it missed is not sent", async () => {
    const { id, endpoint } = await inError('Mended');
    // While it is in error, an event: its reactivation handshake fails (the receiver is still down) and is not sent.
    const missed = await patient('Mended');
    await waitFor(async () => ((await attemptsOf(t, id)).at(-1)?.kind === 'handshake' ? true : undefined));
    // The backoff holds events back (for an hour here): not the operator's request.
    await holdEventsBack(id);
    const byEvent = (await attemptsOf(t, id)).at(-1)!;
    expect(byEvent).toMatchObject({ kind: 'handshake', attempt: 1, outcome: 'failed', http_status: 503, resource_id: missed.id });

    // The receiver fixed, the operator asks: the handshake goes at once, though events would wait.
    endpoint.answer = () => ({ status: 200 });
    const before = endpoint.calls.length;
    const response = await reactivate(id);
    expect(response.statusCode, response.body).toBe(200);
    expect(response.headers['content-type']).toContain('application/fhir+json');
    const answered = response.json<Json>();
    expect(answered).toMatchObject({ resourceType: 'Subscription', id, status: 'active', criteria: 'Patient?family=Mended' });
    expect(answered.error).toBeUndefined();
    // One call: the reactivation handshake, as an event's sends it (status error), signed with the subscription's secret.
    expect(endpoint.calls).toHaveLength(before + 1);
    const handshake = endpoint.calls.at(-1)!;
    expect(handshake.json).toMatchObject({
      resourceType: 'Bundle',
      type: 'history',
      entry: [
        {
          resource: {
            resourceType: 'SubscriptionStatus',
            type: 'handshake',
            status: 'error',
            subscription: { reference: `${serviceBase}/Subscription/${id}` },
          },
        },
      ],
    });
    expect(handshake.headers.secret).toBe('top-secret');
    expect(await verify('top-secret', handshake.body.toString('utf8'), handshake.headers['x-hub-signature'] as string)).toBe(true);
    // Recorded as an event's reactivation handshake is, without an event; the same change: active, failures reset.
    expect((await attemptsOf(t, id)).at(-1)).toMatchObject({
      kind: 'handshake',
      attempt: 1,
      outcome: 'delivered',
      http_status: 200,
      error: null,
      resource_id: null,
    });
    expect(await statusOf(t, id)).toEqual({ status: 'active', error: null, failure_count: 0 });
    // As after an event's reactivation, the run of deactivations ends at a delivery, not at the handshake; the failed handshake did not add to it.
    expect((await backoffOf(id)).deactivations).toBe(1);

    // The event missed while in error is not sent; the next one is, and ends the run.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(endpoint.calls.filter((call) => call.json.id === missed.id)).toEqual([]);
    const next = await patient('Mended');
    await waitFor(() => (endpoint.calls.some((call) => call.json.id === next.id) ? true : undefined));
    await waitFor(async () => ((await backoffOf(id)).deactivations === 0 ? true : undefined));
    expect(endpoint.calls.filter((call) => call.json.id === missed.id)).toEqual([]);
  });

  it('a handshake that fails again leaves the subscription in error with the new reason, recorded, and answers 502 saying why', async () => {
    const { id, endpoint } = await inError('StillBroken');
    const asked = new Date();
    const response = await reactivate(id);
    expect(response.statusCode).toBe(502);
    const reason = `Reactivation handshake failed: HTTP 503 from ${endpoint.url}`;
    expect(response.json()).toEqual({
      resourceType: 'OperationOutcome',
      issue: [{ severity: 'error', code: 'transient', details: { text: `Subscription/${id} was not reactivated. ${reason}` } }],
    });
    expect(await statusOf(t, id)).toMatchObject({ status: 'error', error: reason });
    expect((await attemptsOf(t, id)).at(-1)).toMatchObject({ kind: 'handshake', outcome: 'failed', http_status: 503, resource_id: null });
    // Like an event's failed handshake, not flapping: the next event may send the handshake again at once.
    const backoff = await backoffOf(id);
    expect(backoff.deactivations).toBe(1);
    expect(backoff.notBefore!.getTime()).toBeLessThanOrEqual(asked.getTime());
  });

  it('refuses a subscription that is not in error (active, requested, off) with 409, calling nothing', async () => {
    const endpoint = await receiver();
    // Its handshake answered after a while: requested until then.
    endpoint.answer = () => ({ status: 200, delayMs: 1_500 });
    const { id } = await subscribe(t, 'Patient?family=NotInError', endpoint.url);
    const requested = await reactivate(id);
    expect(requested.statusCode).toBe(409);
    expect(requested.json().issue[0]).toMatchObject({
      code: 'conflict',
      details: { text: expect.stringMatching(new RegExp(`^Subscription/${id} is requested: `)) },
    });
    await untilStatus(t, id, 'active');
    const calls = endpoint.calls.length;

    const active = await reactivate(id);
    expect(active.statusCode).toBe(409);
    expect(active.json().issue[0].details.text).toBe(`Subscription/${id} is active: only a subscription in error is reactivated`);

    await t.fhir('POST', '/Subscription', { resourceType: 'Subscription', status: 'off', criteria: 'Patient?family=NotInError' });
    const off = await reactivate(id);
    expect(off.statusCode).toBe(409);
    expect(off.json().issue[0].details.text).toBe(`Subscription/${id} is off: a subscription switched off never comes back; create a new one`);
    expect(endpoint.calls).toHaveLength(calls);
    expect((await statusOf(t, id)).status).toBe('off');
  });

  it('refuses a superseded subscription in error (a newer one exists for its criteria) with 409, calling nothing', async () => {
    const { id, endpoint } = await inError('Superseded');
    endpoint.answer = () => ({ status: 200 });
    const successor = await receiver();
    const { id: newer } = await subscribe(t, 'Patient?family=Superseded', successor.url);
    await untilStatus(t, newer, 'active');
    const calls = endpoint.calls.length;
    const response = await reactivate(id);
    expect(response.statusCode).toBe(409);
    expect(response.json().issue[0].details.text).toBe(
      `Subscription/${id} is superseded: a newer subscription exists for its criteria, and a superseded subscription is never called again (switching the criteria off ends it)`,
    );
    expect(endpoint.calls).toHaveLength(calls);
    expect((await statusOf(t, id)).status).toBe('error');
  });

  it("is for the subscription's own key or an admin key, with the write scope: another key's is not known (404), a read-only key is refused (403)", async () => {
    const owner = (await createApiKey(t.database.db, 'owner', ['read', 'write'])).key;
    const other = (await createApiKey(t.database.db, 'other', ['read', 'write'])).key;
    const reader = (await createApiKey(t.database.db, 'reader', ['read', 'admin'])).key;
    const { id, endpoint } = await inError('Owned', { headers: { 'x-api-key': owner } });
    endpoint.answer = () => ({ status: 200 });
    const calls = endpoint.calls.length;

    const notTheirs = await reactivate(id, { 'x-api-key': other });
    expect(notTheirs.statusCode).toBe(404);
    expect(notTheirs.json().issue[0]).toMatchObject({ code: 'not-found', details: { text: `Subscription/${id} is not known` } });
    const readOnly = await reactivate(id, { 'x-api-key': reader });
    expect(readOnly.statusCode).toBe(403);
    expect(readOnly.json().issue[0]).toMatchObject({ code: 'forbidden', details: { text: expect.stringContaining('lacks the write scope') } });
    for (const unknown of ['00000000-0000-4000-8000-000000000000', 'not-an-id']) {
      const response = await reactivate(unknown);
      expect(response.statusCode).toBe(404);
      expect(response.json().issue[0].details.text).toBe(`Subscription/${unknown} is not known`);
    }
    expect(endpoint.calls).toHaveLength(calls);

    const own = await reactivate(id, { 'x-api-key': owner });
    expect(own.statusCode, own.body).toBe(200);
    expect(own.json()).toMatchObject({ id, status: 'active' });
  });

  it("takes no parameters (400 in the spec's refusal format), an empty Parameters body being none, and only by POST (405)", async () => {
    const { id, endpoint } = await inError('NoParameters');
    endpoint.answer = () => ({ status: 200 });
    const withParameter = await t.fhir('POST', `/Subscription/${id}/$reactivate`, {
      resourceType: 'Parameters',
      parameter: [{ name: 'force', valueBoolean: true }],
    });
    expect(withParameter.statusCode).toBe(400);
    expect(withParameter.json().issue[0]).toEqual({
      severity: 'error',
      code: 'exception',
      details: { text: "ValidationError: ['$reactivate takes no parameters: send no body, or a Parameters without any parameter']" },
    });
    const byGet = await t.fhir('GET', `/Subscription/${id}/$reactivate`);
    expect(byGet.statusCode).toBe(405);
    expect(byGet.headers.allow).toBe('POST');
    expect((await statusOf(t, id)).status).toBe('error');

    const empty = await t.fhir('POST', `/Subscription/${id}/$reactivate`, { resourceType: 'Parameters' });
    expect(empty.statusCode, empty.body).toBe(200);
    expect(empty.json()).toMatchObject({ id, status: 'active' });
  });

  it('a topic-based subscription: the handshake counts the events so far, the missed ones numbered; they are not sent, and $events serves them', async () => {
    const endpoint = await receiver();
    const { id, finished } = await encountersOf('on-demand', endpoint);
    // Event 1 refused: in error.
    endpoint.answer = () => ({ status: 503 });
    await finished('on-demand-1');
    await untilStatus(t, id, 'error');
    // Event 2's reactivation handshake fails; event 3 comes while events are held back from reactivating it.
    await finished('on-demand-2');
    await waitFor(async () => ((await attemptsOf(t, id)).filter((attempt) => attempt.kind === 'handshake').length === 2 ? true : undefined));
    await holdEventsBack(id);
    await finished('on-demand-3');

    endpoint.answer = () => ({ status: 200 });
    const before = endpoint.calls.length;
    const response = await reactivate(id);
    expect(response.statusCode, response.body).toBe(200);
    expect(endpoint.calls).toHaveLength(before + 1);
    const handshake = endpoint.calls.at(-1)!.json;
    expect(notificationProblems(handshake, { subscriptionId: id, type: 'handshake', status: 'error', content: 'id-only' })).toEqual([]);
    // Events 2 and 3 were missed, numbered by this handshake (event 3 by nothing else).
    expect(statusValue(handshake, 'events-since-subscription-start')).toBe('3');
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(endpoint.calls).toHaveLength(before + 1);
    const fetched = (await t.fhir('GET', `/Subscription/${id}/$events?eventsSinceNumber=2&eventsUntilNumber=3`)).json<Json>();
    expect(eventNumbers(fetched)).toEqual([2, 3]);
    expect(fetched.entry.slice(1).map((entry: Json) => entry.fullUrl)).toEqual([
      `${serviceBase}/Encounter/on-demand-2`,
      `${serviceBase}/Encounter/on-demand-3`,
    ]);
    // The next event is sent, numbered after them.
    await finished('on-demand-4');
    const [notification] = await waitFor(() => (endpoint.calls.length > before + 1 ? endpoint.calls.slice(before + 1) : undefined));
    expect(eventNumbers(notification!.json)).toEqual([4]);
  });
});

describe("an operator's reactivation and an event's at once: one handshake at a time", () => {
  /** A receiver in error whose handshakes are answered 200: the first one after `slowFirst` ms, the others at once. */
  async function racing(family: string, slowFirstMs: number) {
    const scene = await inError(family);
    let handshakes = 0;
    scene.endpoint.answer = (call) => (isHandshake(call) && ++handshakes === 1 ? { status: 200, delayMs: slowFirstMs } : { status: 200 });
    return scene;
  }

  it("an operator's request while an event's handshake is in flight waits for it: one handshake, active, the event delivered once, the operator answered 200", async () => {
    const { id, endpoint } = await racing('RaceEventInFlight', 1_500);
    const calls = endpoint.calls.length;
    // The event's reactivation handshake arrives first and is answered late.
    const event = await patient('RaceEventInFlight');
    await endpoint.waitForCalls(calls + 1);
    const response = await reactivate(id);
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toMatchObject({ id, status: 'active' });
    await waitFor(() => (endpoint.calls.some((call) => call.json.id === event.id) ? true : undefined));
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(endpoint.calls.filter((call) => call.json.id === event.id)).toHaveLength(1);
    const handshakes = (await attemptsOf(t, id)).filter((attempt) => attempt.kind === 'handshake').slice(1);
    expect(handshakes.map(({ outcome, resource_id }) => ({ outcome, resource_id }))).toEqual([{ outcome: 'delivered', resource_id: event.id }]);
    expect(await statusOf(t, id)).toEqual({ status: 'active', error: null, failure_count: 0 });
  });

  it("an event while an operator's handshake is in flight waits for it, then is delivered like any other: one handshake, the operator answered 200", async () => {
    const { id, endpoint } = await racing('RaceOperatorInFlight', 1_500);
    const calls = endpoint.calls.length;
    const asked = reactivate(id);
    await endpoint.waitForCalls(calls + 1);
    const event = await patient('RaceOperatorInFlight');
    const response = await asked;
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toMatchObject({ id, status: 'active' });
    await waitFor(() => (endpoint.calls.some((call) => call.json.id === event.id) ? true : undefined));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(endpoint.calls.filter((call) => call.json.id === event.id)).toHaveLength(1);
    const handshakes = (await attemptsOf(t, id)).filter((attempt) => attempt.kind === 'handshake').slice(1);
    expect(handshakes.map(({ outcome, resource_id }) => ({ outcome, resource_id }))).toEqual([{ outcome: 'delivered', resource_id: null }]);
    expect(await statusOf(t, id)).toEqual({ status: 'active', error: null, failure_count: 0 });
  });
});

describe('one reactivation handshake per subscription at a time (issue 33)', () => {
  /** A topic-based subscription on encounters of `patient` put in error by a refused event; its receiver still answers 503. */
  async function topicInError(patientId: string): Promise<{ id: string; endpoint: Receiver; finished: (encounter: string) => Promise<unknown> }> {
    const endpoint = await receiver();
    const { id, finished } = await encountersOf(patientId, endpoint);
    endpoint.answer = () => ({ status: 503 });
    await finished(`${patientId}-0`);
    await untilStatus(t, id, 'error');
    return { id, endpoint, finished };
  }

  /** A topic-based subscription's handshake (its notifications are history Bundles too). */
  const isTopicHandshake = (call: ReceivedCall) => statusValue(call.json, 'type') === 'handshake';

  /** Answers handshakes after `delayMs` with `status`, counting how many are in flight at once at most. */
  function slowHandshakes(endpoint: Receiver, status: number, delayMs: number): { mostAtOnce: () => number } {
    let inFlight = 0;
    let most = 0;
    endpoint.answer = (call) => {
      if (!isTopicHandshake(call)) return { status: 200 };
      most = Math.max(most, ++inFlight);
      setTimeout(() => inFlight--, delayMs);
      return { status, delayMs };
    };
    return { mostAtOnce: () => most };
  }

  it('12 concurrent writes matching a topic-based subscription in error send one handshake, which reactivates it', async () => {
    const { id, endpoint, finished } = await topicInError('burst');
    const handshakesBefore = endpoint.calls.filter(isTopicHandshake).length;
    const receiving = slowHandshakes(endpoint, 200, 300);
    await Promise.all(Array.from({ length: 12 }, (_, index) => finished(`burst-${index + 1}`)));
    await untilStatus(t, id, 'active');
    // The jobs of the writes that came while the handshake was in flight have run by now.
    await waitFor(async () =>
      (await t.database.pool.query(`SELECT 1 FROM graphile_worker.jobs WHERE key = $1`, [`reactivate:${id}`])).rowCount === 0 ? true : undefined,
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(endpoint.calls.filter(isTopicHandshake).length - handshakesBefore).toBe(1);
    expect(receiving.mostAtOnce()).toBe(1);
  });

  it("a receiver still down gets one handshake at a time, whoever asks: concurrent writes and operators' requests", async () => {
    const { id, endpoint, finished } = await topicInError('down');
    const handshakesBefore = endpoint.calls.filter(isTopicHandshake).length;
    const receiving = slowHandshakes(endpoint, 503, 300);
    const [requests] = await Promise.all([
      Promise.all([reactivate(id), reactivate(id)]),
      Promise.all(Array.from({ length: 12 }, (_, index) => finished(`down-${index + 1}`))),
    ]);
    expect(requests.map((response) => response.statusCode)).toEqual([502, 502]);
    await waitFor(async () =>
      (await t.database.pool.query(`SELECT 1 FROM graphile_worker.jobs WHERE key = $1`, [`reactivate:${id}`])).rowCount === 0 ? true : undefined,
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    // Each request's, and the events': several handshakes, never two at once.
    expect(endpoint.calls.filter(isTopicHandshake).length - handshakesBefore).toBeGreaterThanOrEqual(3);
    expect(receiving.mostAtOnce()).toBe(1);
    expect(await statusOf(t, id)).toMatchObject({ status: 'error' });
  });
});

describe('a receiver that was down, and one that flaps (issue 33)', () => {
  const failedHandshakes = async (id: string) =>
    (await attemptsOf(t, id)).filter((attempt) => attempt.kind === 'handshake' && attempt.outcome === 'failed').length;

  it(
    'a subscriber whose handshakes failed several times is reactivated by the first event after its receiver recovers; a flapping one still backs off',
    { timeout: 60_000 },
    async () => {
      // Down: every call refused, handshakes included. Each event while it is in error sends the handshake again.
      const { id: down, endpoint: downEndpoint } = await inError('Outage');
      for (let failed = 1; failed <= 4; failed++) {
        await patient('Outage');
        await waitFor(async () => ((await failedHandshakes(down)) === failed ? true : undefined), 5_000, `failed handshake ${failed}`);
      }
      // Failed handshakes are not flapping: no wait before the next event may reactivate it.
      expect(await backoffOf(down)).toEqual({ deactivations: 1, notBefore: expect.any(Date) });
      expect((await backoffOf(down)).notBefore!.getTime()).toBeLessThanOrEqual(Date.now());
      // Recovered: the first event reactivates it and is delivered.
      downEndpoint.answer = () => ({ status: 200 });
      const first = await patient('Outage');
      await waitFor(() => (downEndpoint.calls.some((call) => call.json.id === first.id) ? true : undefined), 5_000, 'the first event after the recovery');
      expect(await statusOf(t, down)).toEqual({ status: 'active', error: null, failure_count: 0 });

      // Flapping: its handshakes pass, its notifications fail. Deactivated twice in a row: the events of the next second leave it in error.
      const flapping = await receiver();
      flapping.answer = (call) => ({ status: isHandshake(call) ? 200 : 503 });
      const { id: flapper } = await subscribe(t, 'Patient?family=Flapper', flapping.url);
      await untilStatus(t, flapper, 'active');
      await patient('Flapper');
      await untilStatus(t, flapper, 'error');
      await patient('Flapper');
      await waitFor(async () => ((await backoffOf(flapper)).deactivations === 2 ? true : undefined), 5_000, 'a second deactivation');
      const handshakes = flapping.calls.filter(isHandshake).length;
      await patient('Flapper');
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(flapping.calls.filter(isHandshake)).toHaveLength(handshakes);
      expect((await statusOf(t, flapper)).status).toBe('error');
      expect((await backoffOf(flapper)).notBefore!.getTime()).toBeGreaterThan(Date.now());

      // subscriptions show says when an event may reactivate it next (held back for longer than the command takes to start).
      await holdEventsBack(flapper);
      const { notBefore } = await backoffOf(flapper);
      const shown = await runCommand(
        process.execPath,
        [cliEntry, 'subscriptions', 'show', flapper],
        childEnvironment({ DATABASE_URL: t.database.url, LOG_LEVEL: 'warn' }),
      );
      expect(shown.exitCode, shown.output).toBe(0);
      expect(shown.output).toContain(
        `\n  next      an event from ${notBefore!.toISOString()} on may reactivate it (flapping: 2 deactivations in a row without a delivery)\n`,
      );
    },
  );
});

describe.skipIf(chromiumMissing)("the console's Reactivate button (Debian's chromium)", () => {
  let browser: Browser;
  let consoleUrl: string;

  beforeAll(async () => {
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    consoleUrl = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}/console`;
    browser = await launchChromium();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
  });

  it(
    'is on a subscription in error only; a click sends the handshake and says what became of it: still in error with why, or active',
    { timeout: 60_000 },
    async () => {
      const { id, endpoint } = await inError('Console');
      const healthy = await receiver();
      const { id: active } = await subscribe(t, 'Patient?family=ConsoleActive', healthy.url);
      await untilStatus(t, active, 'active');
      const operator = (await createApiKey(t.database.db, 'console operator', ['read', 'write', 'admin'])).key;
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('pageerror', (error) => errors.push(error.message));
      page.on('console', (message) => (message.type() === 'error' ? errors.push(message.text()) : undefined));
      await page.goto(consoleUrl);
      await page.fill('#key', operator);
      await page.click('button[type=submit]');
      const row = page.locator('#subscriptions tbody tr', { hasText: id });
      await expect.poll(() => row.locator('.status').textContent(), { timeout: 10_000 }).toBe('error');
      expect(await page.locator('#subscriptions tbody tr', { hasText: active }).locator('button.reactivate').count()).toBe(0);

      // The receiver still down: refused, with the reason; still in error.
      await row.locator('button.reactivate').click();
      await expect
        .poll(() => page.textContent('#reactivate-result'))
        .toBe(`Not reactivated: Subscription/${id} was not reactivated. Reactivation handshake failed: HTTP 503 from ${endpoint.url}`);
      expect((await statusOf(t, id)).status).toBe('error');
      // The click did not open the row (its own click does).
      expect(await page.isVisible('#detail')).toBe(false);

      // Fixed: reactivated, shown active, and the button gone.
      endpoint.answer = () => ({ status: 200 });
      await row.locator('button.reactivate').click();
      await expect.poll(() => page.textContent('#reactivate-result'), { timeout: 10_000 }).toBe(`Reactivated ${id}: it is active`);
      await expect.poll(() => row.locator('.status').textContent(), { timeout: 10_000 }).toBe('active');
      expect(await row.locator('button.reactivate').count()).toBe(0);
      expect(await statusOf(t, id)).toEqual({ status: 'active', error: null, failure_count: 0 });
      expect(endpoint.calls.filter(isHandshake)).toHaveLength(3);
      // The browser logs the refused request itself (502); the page's script threw nothing.
      expect(errors.filter((error) => !error.includes('status of 502'))).toEqual([]);
      await page.close();
    },
  );
});
