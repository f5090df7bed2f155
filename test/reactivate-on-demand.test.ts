import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { verify } from '@octokit/webhooks-methods';
import type { Browser } from 'playwright-core';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey } from '../src/auth/api-keys.ts';
import { loadConfig } from '../src/config/index.ts';
import { startWorkers, type Workers } from '../src/dispatch/worker.ts';
import { createMetrics } from '../src/metrics/metrics.ts';
import { addTopics } from '../src/topics/store.ts';
import { baseUrl, serviceBase, startTestApp, testSecretsKey, type TestApp } from './support/app.ts';
import { eventNumbers, notificationProblems, statusValue, type Json } from './support/backport-conformance.ts';
import { childEnvironment, runCommand } from './support/commands.ts';
import { startReceiver, waitFor, type ReceivedCall, type Receiver } from './support/receiver.ts';
import { chromiumMissing, launchChromium } from './support/chromium.ts';
import { attemptsOf, statusOf, subscribe, untilStatus } from './support/subscriptions.ts';

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
  await addTopics(t.database.db, [JSON.parse(readFileSync(new URL('../examples/topics/encounter-complete.json', import.meta.url), 'utf8'))]);
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
const holdEventsBack = (id: string) => t.database.pool.query(`UPDATE webhook.subscriptions SET reactivation_not_before = now() + interval '1 hour' WHERE id = $1`, [id]);

/** A subscription on Patient?family=`family` put in error the usual way: active, then its receiver answered 503 to an event. The receiver still answers 503. */
async function inError(family: string, options: { headers?: Record<string, string> } = {}): Promise<{ id: string; endpoint: Receiver }> {
  const endpoint = await receiver();
  const response = await t.fhir(
    'POST',
    '/Subscription',
    { resourceType: 'Subscription', status: 'requested', criteria: `Patient?family=${family}`, reason: 'test', channel: { type: 'rest-hook', endpoint: endpoint.url, header: ['secret: top-secret'] } },
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
  it('sends the handshake now, not held by the backoff; on 2xx the subscription is active as after an event, the handshake recorded as an event\'s, and the event it missed is not sent', async () => {
    const { id, endpoint } = await inError('Mended');
    // While it is in error, an event: its reactivation handshake fails (the receiver is still down) and is not sent.
    const missed = await patient('Mended');
    await waitFor(async () => ((await backoffOf(id)).deactivations === 2 ? true : undefined));
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
      entry: [{ resource: { resourceType: 'SubscriptionStatus', type: 'handshake', status: 'error', subscription: { reference: `${serviceBase}/Subscription/${id}` } } }],
    });
    expect(handshake.headers.secret).toBe('top-secret');
    expect(await verify('top-secret', handshake.body.toString('utf8'), handshake.headers['x-hub-signature'] as string)).toBe(true);
    // Recorded as an event's reactivation handshake is, without an event; the same change: active, failures reset.
    expect((await attemptsOf(t, id)).at(-1)).toMatchObject({ kind: 'handshake', attempt: 1, outcome: 'delivered', http_status: 200, error: null, resource_id: null });
    expect(await statusOf(t, id)).toEqual({ status: 'active', error: null, failure_count: 0 });
    // As after an event's reactivation, the run of deactivations ends at a delivery, not at the handshake.
    expect((await backoffOf(id)).deactivations).toBe(2);

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
    // Like an event's failed handshake: the events of a while longer leave it in error.
    const backoff = await backoffOf(id);
    expect(backoff.deactivations).toBe(2);
    expect(backoff.notBefore!.getTime()).toBeGreaterThan(asked.getTime());
  });

  it('refuses a subscription that is not in error (active, requested, off) with 409, calling nothing', async () => {
    const endpoint = await receiver();
    // Its handshake answered after a while: requested until then.
    endpoint.answer = () => ({ status: 200, delayMs: 1_500 });
    const { id } = await subscribe(t, 'Patient?family=NotInError', endpoint.url);
    const requested = await reactivate(id);
    expect(requested.statusCode).toBe(409);
    expect(requested.json().issue[0]).toMatchObject({ code: 'conflict', details: { text: expect.stringMatching(new RegExp(`^Subscription/${id} is requested: `)) } });
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

  it('takes no parameters (400 in the spec\'s refusal format), an empty Parameters body being none, and only by POST (405)', async () => {
    const { id, endpoint } = await inError('NoParameters');
    endpoint.answer = () => ({ status: 200 });
    const withParameter = await t.fhir('POST', `/Subscription/${id}/$reactivate`, { resourceType: 'Parameters', parameter: [{ name: 'force', valueBoolean: true }] });
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
    const ig = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';
    const endpoint = await receiver();
    const created = await t.fhir('POST', '/Subscription', {
      resourceType: 'Subscription',
      status: 'requested',
      reason: 'Encounters that became finished',
      criteria: 'http://example.org/topics/encounter-complete',
      _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: 'Encounter?patient=Patient/on-demand' }] },
      channel: { type: 'rest-hook', endpoint: endpoint.url, payload: 'application/fhir+json', _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'id-only' }] } },
    });
    expect(created.statusCode, created.body).toBe(201);
    const { id } = created.json<{ id: string }>();
    await untilStatus(t, id, 'active');
    const finished = (encounter: string) =>
      t.fhir('PUT', `/Encounter/${encounter}`, { resourceType: 'Encounter', id: encounter, status: 'finished', class: { code: 'AMB' }, subject: { reference: 'Patient/on-demand' } });
    // Event 1 refused: in error.
    endpoint.answer = () => ({ status: 503 });
    await finished('on-demand-1');
    await untilStatus(t, id, 'error');
    // Event 2's reactivation handshake fails; event 3 comes while events are held back from reactivating it.
    await finished('on-demand-2');
    await waitFor(async () => ((await backoffOf(id)).deactivations === 2 ? true : undefined));
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
    expect(fetched.entry.slice(1).map((entry: Json) => entry.fullUrl)).toEqual([`${serviceBase}/Encounter/on-demand-2`, `${serviceBase}/Encounter/on-demand-3`]);
    // The next event is sent, numbered after them.
    await finished('on-demand-4');
    const [notification] = await waitFor(() => (endpoint.calls.length > before + 1 ? endpoint.calls.slice(before + 1) : undefined));
    expect(eventNumbers(notification!.json)).toEqual([4]);
  });
});

describe("an operator's reactivation and an event's at once", () => {
  /** A receiver in error whose handshakes are answered 200: the first one after `slowFirst` ms, the others at once. */
  async function racing(family: string, slowFirstMs: number) {
    const scene = await inError(family);
    let handshakes = 0;
    scene.endpoint.answer = (call) => (isHandshake(call) && ++handshakes === 1 ? { status: 200, delayMs: slowFirstMs } : { status: 200 });
    return scene;
  }

  it("the operator's handshake answered first: active once, both calls recorded, and the event that came meanwhile delivered once", async () => {
    const { id, endpoint } = await racing('RaceOperatorFirst', 1_500);
    const calls = endpoint.calls.length;
    // The event's reactivation handshake arrives first and is answered late.
    const event = await patient('RaceOperatorFirst');
    await endpoint.waitForCalls(calls + 1);
    const response = await reactivate(id);
    expect(response.statusCode, response.body).toBe(200);
    // The event's handshake passed too, once the subscription was active: its event is delivered like any other, once.
    await waitFor(() => (endpoint.calls.some((call) => call.json.id === event.id) ? true : undefined));
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(endpoint.calls.filter((call) => call.json.id === event.id)).toHaveLength(1);
    const handshakes = (await attemptsOf(t, id)).filter((attempt) => attempt.kind === 'handshake').slice(1);
    expect(handshakes.map(({ outcome, resource_id }) => ({ outcome, resource_id }))).toEqual([
      { outcome: 'delivered', resource_id: null },
      { outcome: 'delivered', resource_id: event.id },
    ]);
    expect(await statusOf(t, id)).toEqual({ status: 'active', error: null, failure_count: 0 });
  });

  it("the event's handshake answered first: it reactivates and delivers its event; the operator is answered 200, active", async () => {
    const { id, endpoint } = await racing('RaceEventFirst', 1_500);
    const calls = endpoint.calls.length;
    const asked = reactivate(id);
    await endpoint.waitForCalls(calls + 1);
    const event = await patient('RaceEventFirst');
    await waitFor(() => (endpoint.calls.some((call) => call.json.id === event.id) ? true : undefined));
    const response = await asked;
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toMatchObject({ id, status: 'active' });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(endpoint.calls.filter((call) => call.json.id === event.id)).toHaveLength(1);
    const handshakes = (await attemptsOf(t, id)).filter((attempt) => attempt.kind === 'handshake').slice(1);
    expect(handshakes.map(({ outcome, resource_id }) => ({ outcome, resource_id }))).toEqual([
      { outcome: 'delivered', resource_id: event.id },
      { outcome: 'delivered', resource_id: null },
    ]);
    expect(await statusOf(t, id)).toEqual({ status: 'active', error: null, failure_count: 0 });
  });
});

describe('subscriptions reactivate ID (CLI)', () => {
  const settings = {
    DATABASE_URL: '',
    SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'),
    BASE_URL: baseUrl,
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    LOG_LEVEL: 'warn',
  };
  const cli = (id: string, overrides: Record<string, string> = {}) =>
    runCommand(process.execPath, ['src/cli.ts', 'subscriptions', 'reactivate', id], childEnvironment({ ...settings, DATABASE_URL: t.database.url, ...overrides }));

  it('sends the handshake from the command line with the service\'s settings, and exits 0 when reactivated, 1 when not, 2 for a wrong id or configuration', { timeout: 60_000 }, async () => {
    const { id, endpoint } = await inError('Cli');
    const failed = await cli(id);
    expect(failed.exitCode, failed.output).toBe(1);
    expect(failed.output).toBe(`Subscription/${id} was not reactivated. Reactivation handshake failed: HTTP 503 from ${endpoint.url}.\n`);
    expect(await statusOf(t, id)).toMatchObject({ status: 'error', error: `Reactivation handshake failed: HTTP 503 from ${endpoint.url}` });

    endpoint.answer = () => ({ status: 200 });
    const before = endpoint.calls.length;
    const done = await cli(id);
    expect(done.exitCode, done.output).toBe(0);
    expect(done.output).toBe(
      `Reactivated subscription ${id}: its receiver answered the handshake with HTTP 200; it is active. The events it missed while in error are not sent (docs/operators.md says how to catch up).\n`,
    );
    expect(await statusOf(t, id)).toEqual({ status: 'active', error: null, failure_count: 0 });
    // The handshake as the service sends it: its BASE_URL, the stored header and signing secret decrypted with its key.
    const handshake = endpoint.calls[before]!;
    expect(handshake.json).toMatchObject({ type: 'history', entry: [{ resource: { type: 'handshake', status: 'error', subscription: { reference: `${serviceBase}/Subscription/${id}` } } }] });
    expect(handshake.headers.secret).toBe('top-secret');
    expect(await verify('top-secret', handshake.body.toString('utf8'), handshake.headers['x-hub-signature'] as string)).toBe(true);
    expect((await attemptsOf(t, id)).at(-1)).toMatchObject({ kind: 'handshake', outcome: 'delivered', http_status: 200, resource_id: null });

    const again = await cli(id);
    expect(again.exitCode).toBe(1);
    expect(again.output).toBe(`Subscription/${id} is active: only a subscription in error is reactivated.\n`);
    const unknown = await cli('00000000-0000-4000-8000-000000000000');
    expect(unknown.exitCode).toBe(1);
    expect(unknown.output).toBe('Subscription/00000000-0000-4000-8000-000000000000 is not known.\n');
    const wrongId = await cli('not-an-id');
    expect(wrongId.exitCode).toBe(2);
    expect(wrongId.output).toContain("'not-an-id' is not a subscription id");
    const withoutKey = await cli(id, { SECRETS_ENCRYPTION_KEY: '' });
    expect(withoutKey.exitCode).toBe(2);
    expect(withoutKey.output).toContain('SECRETS_ENCRYPTION_KEY is required with DATABASE_URL');
    expect(endpoint.calls).toHaveLength(before + 1);
  });
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

  it('is on a subscription in error only; a click sends the handshake and says what became of it: still in error with why, or active', { timeout: 60_000 }, async () => {
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
    await expect.poll(() => row.locator('.status').textContent()).toBe('error');
    expect(await page.locator('#subscriptions tbody tr', { hasText: active }).locator('button.reactivate').count()).toBe(0);

    // The receiver still down: refused, with the reason; still in error.
    await row.locator('button.reactivate').click();
    await expect.poll(() => page.textContent('#reactivate-result')).toBe(`Not reactivated: Subscription/${id} was not reactivated. Reactivation handshake failed: HTTP 503 from ${endpoint.url}`);
    expect((await statusOf(t, id)).status).toBe('error');
    // The click did not open the row (its own click does).
    expect(await page.isVisible('#detail')).toBe(false);

    // Fixed: reactivated, shown active, and the button gone.
    endpoint.answer = () => ({ status: 200 });
    await row.locator('button.reactivate').click();
    await expect.poll(() => page.textContent('#reactivate-result')).toBe(`Reactivated ${id}: it is active`);
    await expect.poll(() => row.locator('.status').textContent()).toBe('active');
    expect(await row.locator('button.reactivate').count()).toBe(0);
    expect(await statusOf(t, id)).toEqual({ status: 'active', error: null, failure_count: 0 });
    expect(endpoint.calls.filter(isHandshake)).toHaveLength(3);
    // The browser logs the refused request itself (502); the page's script threw nothing.
    expect(errors.filter((error) => !error.includes('status of 502'))).toEqual([]);
    await page.close();
  });
});
