import { readFileSync } from 'node:fs';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/auth/api-keys.ts';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { addTopics } from '../../src/topics/store.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { eventNumbers, type Json } from '../support/backport-conformance.ts';
import { r4Problems } from '../support/r4-validation.ts';
import { childEnvironment, cliEntry, runCommand } from '../support/commands.ts';
import { startReceiver, waitFor, type ReceivedCall, type Receiver } from '../support/receiver.ts';
import { subscribe, untilStatus } from '../support/subscriptions.ts';

/**
 * Resending recorded events (issue 19): through the API ($resend) and the
 * CLI (deliveries resend), to a receiver that counts what it gets; a resend
 * is the same event again (number, version, webhook-id), and is refused
 * where it would surprise.
 */

let t: TestApp;
let workers: Workers;
const receivers: Receiver[] = [];

beforeAll(async () => {
  t = await startTestApp();
  workers = await startWorkers(
    loadConfig({
      BASE_URL: baseUrl,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      WEBHOOK_STANDARD_SIGNATURES: 'true',
      DELIVERY_RETRY_DELAYS_MS: '100',
      DELIVERY_MAX_FAILURES: '3',
    }),
    t.database,
    testSecretsKey,
    pino({ level: 'silent' }),
  );
});
afterAll(async () => {
  await workers.stop();
  await Promise.all(receivers.map((receiver) => receiver.close()));
  await t.close();
});

/** A subscriber that refuses (400) the resources whose family is in `refused`, and counts every call by resource. */
async function refusingReceiver(refused: Set<string>): Promise<Receiver> {
  const receiver = await startReceiver();
  receivers.push(receiver);
  receiver.answer = (call) => ({ status: refused.has(((call.json.name as { family: string }[] | undefined) ?? [])[0]?.family ?? '') ? 400 : 200 });
  return receiver;
}

const callsFor = (receiver: Receiver, id: string): ReceivedCall[] => receiver.calls.filter((call) => call.json.id === id);
const parameters = (events: { name: string; value: Record<string, unknown> }[]) => ({
  resourceType: 'Parameters',
  parameter: events.map(({ name, value }) => ({ name, ...value })),
});
const resend = (subscriptionId: string, name: string, value: Record<string, unknown>, headers: Record<string, string> = {}) =>
  t.fhir('POST', `/Subscription/${subscriptionId}/$resend`, parameters([{ name, value }]), headers);

async function eventOf(subscriptionId: string, resourceId: string): Promise<{ id: string; event_number: string; status: string }> {
  return waitFor(
    async () => {
      const { rows } = await t.database.pool.query(
        `SELECT id, event_number, status FROM webhook.subscription_events WHERE subscription_id = $1 AND resource_id = $2 AND status <> 'pending' ORDER BY id DESC LIMIT 1`,
        [subscriptionId, resourceId],
      );
      return rows[0];
    },
    5000,
    `the event of ${resourceId} settled`,
  );
}

async function writePatient(family: string, id: string): Promise<void> {
  const response = await t.fhir('PUT', `/Patient/${id}`, { resourceType: 'Patient', id, name: [{ family }] });
  expect(response.statusCode).toBeLessThan(300);
}

describe('$resend', () => {
  it('sends a refused event again, by number, as the same event (same version and webhook-id), recorded as a call', async () => {
    const refused = new Set(['Refused']);
    const endpoint = await refusingReceiver(refused);
    const { id } = await subscribe(t, 'Patient?family=Refused,Accepted', endpoint.url);
    await untilStatus(t, id, 'active');
    await writePatient('Refused', 'resend-1');
    const event = await eventOf(id, 'resend-1');
    expect(event.status).toBe('failed');
    // The subscriber is fixed; the client asks for the event again.
    refused.clear();
    const answer = await resend(id, 'eventNumber', { valueString: event.event_number });
    expect(answer.statusCode, answer.body).toBe(200);
    expect(answer.json()).toEqual({
      resourceType: 'Parameters',
      parameter: [
        {
          name: 'queued',
          part: [
            { name: 'eventNumber', valueString: event.event_number },
            { name: 'resource', valueReference: { reference: 'Patient/resend-1/_history/1' } },
          ],
        },
      ],
    });
    await waitFor(() => (callsFor(endpoint, 'resend-1').length === 2 ? true : undefined), 5000, 'the resend');
    const [first, again] = callsFor(endpoint, 'resend-1');
    expect(again!.json).toMatchObject({ meta: { versionId: '1' } });
    expect(again!.headers['webhook-id']).toBe(first!.headers['webhook-id']);
    // Recorded once the receiver's answer is read: just after it arrives.
    const rows = await waitFor(
      async () => {
        const { rows: recorded } = await t.database.pool.query(
          `SELECT attempt, outcome FROM webhook.delivery_attempts WHERE subscription_id = $1 AND resource_id = 'resend-1' ORDER BY id`,
          [id],
        );
        return recorded.length === 2 ? recorded : undefined;
      },
      5000,
      'the resend recorded',
    );
    expect(rows).toEqual([
      { attempt: 1, outcome: 'failed' },
      { attempt: 1, outcome: 'delivered' },
    ]);
  });

  it('sends every event failed for good since an instant, and by the id of a recorded call; skips and refuses what it must, saying why', async () => {
    const refused = new Set(['Refused']);
    const endpoint = await refusingReceiver(refused);
    const { id } = await subscribe(t, 'Patient?family=Refused,Accepted&_id=since-1,since-2,since-3,since-4', endpoint.url);
    await untilStatus(t, id, 'active');
    const before = new Date();
    await writePatient('Refused', 'since-1');
    await writePatient('Accepted', 'since-2');
    await writePatient('Refused', 'since-3');
    await eventOf(id, 'since-3');
    refused.clear();

    // Only the events that failed for good: the delivered one between them is not sent again.
    const answer = await resend(id, 'failedSince', { valueInstant: before.toISOString() });
    expect(answer.statusCode, answer.body).toBe(200);
    expect(answer.json<Json>().parameter.map((parameter: Json) => [parameter.name, parameter.part.at(-1).valueReference?.reference])).toEqual([
      ['queued', 'Patient/since-1/_history/1'],
      ['queued', 'Patient/since-3/_history/1'],
    ]);
    await waitFor(() => (callsFor(endpoint, 'since-3').length === 2 ? true : undefined), 5000, 'the resends');

    // By the id of its recorded call.
    const { rows: calls } = await t.database.pool.query(`SELECT id FROM webhook.delivery_attempts WHERE subscription_id = $1 AND resource_id = 'since-2'`, [
      id,
    ]);
    const byCall = await resend(id, 'attempt', { valueString: String(calls[0].id) });
    expect(byCall.statusCode, byCall.body).toBe(200);
    await waitFor(() => (callsFor(endpoint, 'since-2').length === 2 ? true : undefined), 5000, 'the resend by call');

    // A newer version was sent since: the older one is refused, naming the newer.
    await writePatient('Refused', 'since-4');
    const older = await eventOf(id, 'since-4');
    await writePatient('Accepted', 'since-4');
    await waitFor(() => (callsFor(endpoint, 'since-4').length === 2 ? true : undefined), 5000, 'version 2');
    const refusedOlder = await resend(id, 'eventNumber', { valueString: older.event_number });
    expect(refusedOlder.statusCode).toBe(400);
    expect(refusedOlder.json().issue[0].details.text).toContain('version 2 of the resource was sent since');
  });

  it('answers, when nothing failed for good since the instant, a Parameters that says so: R4, no empty parameter', async () => {
    const endpoint = await refusingReceiver(new Set());
    const { id } = await subscribe(t, 'Patient?family=NothingFailed', endpoint.url);
    await untilStatus(t, id, 'active');
    await writePatient('NothingFailed', 'nothing-failed-1');
    expect((await eventOf(id, 'nothing-failed-1')).status).toBe('delivered');

    const answer = await resend(id, 'failedSince', { valueInstant: new Date(Date.now() - 60_000).toISOString() });
    expect(answer.statusCode, answer.body).toBe(200);
    expect(answer.json()).toEqual({
      resourceType: 'Parameters',
      parameter: [{ name: 'outcome', valueString: 'Nothing to resend: no event failed for good since then' }],
    });
    expect(r4Problems(answer.json())).toEqual([]);
  });

  it('is refused for a subscription the key does not own, one not active, an event no longer held, and a body that does not say which', async () => {
    const endpoint = await refusingReceiver(new Set());
    const { id } = await subscribe(t, 'Patient?family=Owned', endpoint.url);
    await untilStatus(t, id, 'active');
    await writePatient('Owned', 'owned-1');
    const event = await eventOf(id, 'owned-1');

    const { key } = await createApiKey(t.database.db, 'another client', ['read', 'write']);
    expect((await resend(id, 'eventNumber', { valueString: event.event_number }, { 'x-api-key': key })).statusCode).toBe(404);

    await t.database.pool.query(`DELETE FROM webhook.subscription_events WHERE id = $1`, [event.id]);
    const gone = await resend(id, 'eventNumber', { valueString: event.event_number });
    expect(gone.statusCode).toBe(404);
    expect(gone.json().issue[0].details.text).toContain(`Event ${event.event_number} of Subscription/${id} is no longer held`);
    const never = await resend(id, 'eventNumber', { valueString: '999' });
    expect(never.json().issue[0].details.text).toContain('there is no event 999');

    const wrong = await t.fhir('POST', `/Subscription/${id}/$resend`, parameters([]));
    expect(wrong.statusCode).toBe(400);
    expect(wrong.json().issue[0].details.text).toContain('exactly one of eventNumber, attempt, failedSince');

    await t.fhir('POST', '/Subscription', { resourceType: 'Subscription', status: 'off', criteria: 'Patient?family=Owned' });
    const off = await resend(id, 'eventNumber', { valueString: '1' });
    expect(off.statusCode).toBe(400);
    expect(off.json().issue[0].details.text).toContain(`Subscription/${id} is off: only an active subscription is sent to`);
  });

  it('sends a topic-based event again with its number', async () => {
    await addTopics(t.database.db, [JSON.parse(readFileSync('examples/topics/encounter-complete.json', 'utf8'))]);
    const endpoint = await startReceiver();
    receivers.push(endpoint);
    const created = await t.fhir('POST', '/Subscription', {
      resourceType: 'Subscription',
      status: 'requested',
      reason: 'resend',
      criteria: 'http://example.org/topics/encounter-complete',
      channel: {
        type: 'rest-hook',
        endpoint: endpoint.url,
        payload: 'application/fhir+json',
        _payload: { extension: [{ url: 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition/backport-payload-content', valueCode: 'id-only' }] },
      },
    });
    const id = created.json<{ id: string }>().id;
    await untilStatus(t, id, 'active');
    await t.fhir('PUT', '/Encounter/resent', { resourceType: 'Encounter', id: 'resent', status: 'finished', class: { code: 'AMB' } });
    await endpoint.waitForCalls(2);
    await eventOf(id, 'resent');
    expect((await resend(id, 'eventNumber', { valuePositiveInt: 1 })).statusCode).toBe(200);
    const calls = await endpoint.waitForCalls(3);
    expect(calls.slice(1).map((call) => eventNumbers(call.json))).toEqual([[1], [1]]);
    expect(calls[2]!.headers['webhook-id']).toBe(calls[1]!.headers['webhook-id']);
  });
});

describe('npm run cli -- deliveries resend', () => {
  it('queues an event by number, says what it queued, and refuses what it cannot with exit 1', { timeout: 60_000 }, async () => {
    const refused = new Set(['Cli']);
    const endpoint = await refusingReceiver(refused);
    const { id } = await subscribe(t, 'Patient?family=Cli', endpoint.url);
    await untilStatus(t, id, 'active');
    await writePatient('Cli', 'cli-1');
    const event = await eventOf(id, 'cli-1');
    refused.clear();
    const environment = childEnvironment({ DATABASE_URL: t.database.url, LOG_LEVEL: 'warn' });
    const cli = (...args: string[]) => runCommand(process.execPath, [cliEntry, 'deliveries', 'resend', ...args], environment);

    // The numbers resend takes are those `subscriptions show` prints: the EVENT and CALL columns.
    const shown = await runCommand(process.execPath, [cliEntry, 'subscriptions', 'show', id], environment);
    const failedCall = new RegExp(`^\\S+Z\\s+(\\d+)\\s+notification\\s+(\\d+)\\s+Patient/cli-1/_history/1\\s+1\\s+failed\\s+400\\b`, 'm').exec(shown.output);
    expect(failedCall, shown.output).not.toBeNull();
    const [, callId, eventNumber] = failedCall!;
    expect(eventNumber).toBe(event.event_number);

    const queued = await cli(id, '--event', eventNumber!);
    expect(queued.exitCode, queued.output).toBe(0);
    expect(queued.output).toBe(`Queued event ${event.event_number} Patient/cli-1/_history/1\n`);
    await waitFor(() => (callsFor(endpoint, 'cli-1').length === 2 ? true : undefined), 5000, 'the resend');
    const byCall = await cli(id, '--attempt', callId!);
    expect(byCall.exitCode, byCall.output).toBe(0);
    expect(byCall.output).toBe(`Queued event ${event.event_number} Patient/cli-1/_history/1\n`);
    await waitFor(() => (callsFor(endpoint, 'cli-1').length === 3 ? true : undefined), 5000, 'the resend by call');

    const nothing = await cli(id, '--failed-since', new Date().toISOString());
    expect(nothing.output).toBe('Nothing to resend: no event failed for good since then.\n');
    const pending = await cli(id, '--event', '999');
    expect(pending.exitCode).toBe(1);
    // The reason in a terminal's words: the API's refusal wrapping is for HTTP clients.
    expect(pending.output).toMatch(new RegExp(`^Not resent: Subscription/${id} has had [^\\n]*\\.\\n$`));
    expect(pending.output).not.toContain('ValidationError');
    const unsaid = await cli(id);
    expect(unsaid.exitCode).toBe(2);
    expect(unsaid.output).toContain('Say which events: --event <number>, --attempt <id> or --failed-since <instant>.');
  });
});
