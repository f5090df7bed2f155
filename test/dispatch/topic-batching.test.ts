import { verify } from '@octokit/webhooks-methods';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serviceBase, type TestApp } from '../support/app.ts';
import { eventNumbers, notificationProblems, statusValue, type Json } from '../support/backport-conformance.ts';
import { waitFor, type ReceivedCall } from '../support/receiver.ts';
import { statusOf, untilStatus } from '../support/subscriptions.ts';
import { backportIg, exampleTopicUrl, startTopicStack, type TopicStack } from '../support/topics.ts';

/**
 * Several events per notification (issue 28, part 2): a topic-based
 * subscription's events go up to its backport-max-count per call, in
 * event-number order, each as a notification-event of the IG's status; a
 * call's answer decides all of them, a retry carries the same events, and
 * every event has its attempt rows. Real receivers on loopback; every body
 * they get is also checked as R4 JSON (test/support/validate-answers.ts).
 */

let t: TestApp;
let stack: TopicStack;

const topicUrl = exampleTopicUrl;
const ig = backportIg;
const secret = 'batch-secret';
/** Long enough for a test to write more events while a failed notification waits for its retry. */
const retryDelayMs = 1_000;

beforeAll(async () => {
  stack = await startTopicStack({ WEBHOOK_STANDARD_SIGNATURES: 'true', DELIVERY_RETRY_DELAYS_MS: String(retryDelayMs), DELIVERY_MAX_FAILURES: '3' });
  t = stack.t;
});
afterAll(() => stack?.close());

type Content = 'empty' | 'id-only' | 'full-resource';

/** A topic-based subscription on the patient given, active once its handshake is answered; its receiver's calls after the handshake. */
async function subscribe(patient: string, { content = 'id-only', maxCount }: { content?: Content; maxCount?: number } = {}) {
  const receiver = await stack.receiver();
  const response = await t.fhir('POST', '/Subscription', {
    resourceType: 'Subscription',
    status: 'requested',
    reason: 'batching',
    criteria: topicUrl,
    _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: `Encounter?patient=Patient/${patient}` }] },
    channel: {
      ...(maxCount === undefined ? {} : { extension: [{ url: `${ig}/backport-max-count`, valuePositiveInt: maxCount }] }),
      type: 'rest-hook',
      endpoint: receiver.url,
      payload: 'application/fhir+json',
      _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: content }] },
      header: [`secret: ${secret}`],
    },
  });
  expect(response.statusCode, response.body).toBe(201);
  const { id } = response.json<{ id: string }>();
  await untilStatus(t, id, 'active');
  const notifications = async (count: number): Promise<ReceivedCall[]> => (await receiver.waitForCalls(count + 1)).slice(1);
  return { id, receiver, notifications };
}

/** Finished Encounters of the patient, written in one statement (a loader's): one event each. */
async function writeFinished(patient: string, ids: string[]): Promise<void> {
  await t.database.pool.query(
    `INSERT INTO fhir.resources (content)
     SELECT jsonb_build_object('resourceType', 'Encounter', 'id', id, 'status', 'finished', 'class', jsonb_build_object('code', 'AMB'),
                               'subject', jsonb_build_object('reference', 'Patient/' || $1::text))
     FROM unnest($2::text[]) AS id`,
    [patient, ids],
  );
}

const names = (prefix: string, count: number) => Array.from({ length: count }, (_, n) => `${prefix}-${n + 1}`);

/** The subscription's calls as recorded: per event, its number, attempt and outcome, and the call's start. */
async function attemptsOf(subscriptionId: string) {
  const { rows } = await t.database.pool.query<{ event_number: string; attempt: number; outcome: string; http_status: number | null; started_at: Date }>(
    `SELECT event_number, attempt, outcome, http_status, started_at FROM webhook.delivery_attempts
     WHERE subscription_id = $1 AND kind = 'notification' ORDER BY started_at, event_number`,
    [subscriptionId],
  );
  return rows.map((row) => ({ ...row, event_number: Number(row.event_number) }));
}

async function untilSettled(subscriptionId: string, count: number): Promise<void> {
  await waitFor(
    async () =>
      (await t.database.pool.query(`SELECT 1 FROM webhook.subscription_events WHERE subscription_id = $1 AND status <> 'pending'`, [subscriptionId]))
        .rowCount === count
        ? true
        : undefined,
    10_000,
    `${count} events settled`,
  );
}

const standardHeaders = (call: ReceivedCall) => ({
  'webhook-id': String(call.headers['webhook-id']),
  'webhook-timestamp': String(call.headers['webhook-timestamp']),
  'webhook-signature': String(call.headers['webhook-signature']),
});

describe.each(['empty', 'id-only', 'full-resource'] as const)('max-count 5 with %s content', (content) => {
  it('12 events of one statement come in 3 calls of 5, 5 and 2 events, in number order, each once, each call one notification of the IG and signed', async () => {
    const patient = `batch-${content}`;
    await t.fhir('PUT', `/Patient/${patient}`, { resourceType: 'Patient', id: patient, name: [{ family: content }] });
    const { id, receiver, notifications } = await subscribe(patient, { content, maxCount: 5 });
    const written = names(`batch-${content}`, 12);
    await writeFinished(patient, written);

    const calls = await notifications(3);
    await untilSettled(id, 12);
    // Nothing more than the three.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(receiver.calls).toHaveLength(4);
    expect(calls.map((call) => eventNumbers(call.json))).toEqual([
      [1, 2, 3, 4, 5],
      [6, 7, 8, 9, 10],
      [11, 12],
    ]);
    for (const call of calls) {
      expect(notificationProblems(call.json, { subscriptionId: id, type: 'event-notification', status: 'active', content })).toEqual([]);
      // The signature covers the whole body, every event of it.
      expect(await verify(secret, call.body.toString('utf8'), call.headers['x-hub-signature'] as string)).toBe(true);
      new Webhook(secret, { format: 'raw' }).verify(call.body.toString('utf8'), standardHeaders(call));
    }
    // The events so far, this notification's included: its last number.
    expect(calls.map((call) => statusValue(call.json, 'events-since-subscription-start'))).toEqual(['5', '10', '12']);
    // Three notifications, three webhook-ids.
    expect(new Set(calls.map((call) => call.headers['webhook-id'])).size).toBe(3);
    const entries = (call: ReceivedCall) => (call.json.entry as Json[]).slice(1);
    if (content === 'empty') {
      for (const call of calls) expect(entries(call)).toEqual([]);
    } else {
      // Each event's focus as an entry, in the order of the notification-events (number order); every Encounter written once.
      const focusParts = (call: ReceivedCall) =>
        ((call.json as Json).entry[0].resource.parameter as Json[])
          .filter((parameter) => parameter.name === 'notification-event')
          .map((event) => event.part.find((part: Json) => part.name === 'focus').valueReference.reference);
      const foci = (call: ReceivedCall) =>
        entries(call)
          .filter((entry) => entry.fullUrl.includes('/Encounter/'))
          .map((entry) => entry.fullUrl);
      for (const call of calls) expect(foci(call)).toEqual(focusParts(call));
      expect(calls.flatMap(foci).sort()).toEqual(written.map((encounter) => `${serviceBase}/Encounter/${encounter}`).sort());
      if (content === 'full-resource') {
        for (const call of calls) {
          expect(entries(call).map((entry) => entry.resource?.resourceType)).toEqual([...eventNumbers(call.json).map(() => 'Encounter'), 'Patient']);
        }
      } else {
        for (const call of calls) expect(entries(call)).toHaveLength(eventNumbers(call.json).length);
      }
    }
    // Every event has its attempt row: a call of N events is N rows, with its start and outcome.
    const attempts = await attemptsOf(id);
    expect(attempts.map((row) => [row.event_number, row.attempt, row.outcome])).toEqual(Array.from({ length: 12 }, (_, n) => [n + 1, 1, 'delivered']));
    const callsRecorded = new Map<number, number[]>();
    for (const row of attempts) callsRecorded.set(row.started_at.getTime(), [...(callsRecorded.get(row.started_at.getTime()) ?? []), row.event_number]);
    expect([...callsRecorded.values()]).toEqual(calls.map((call) => eventNumbers(call.json)));
  });
});

describe('a notification of several events', () => {
  it('is retried as the same events when its call fails, however many were written meanwhile; each event has both attempts recorded', async () => {
    const patient = 'batch-retried';
    const { id, receiver, notifications } = await subscribe(patient, { maxCount: 5 });
    let failures = 1;
    receiver.answer = () => (failures-- > 0 ? { status: 503 } : { status: 200 });
    await writeFinished(patient, names('batch-retried', 3));
    await notifications(1);
    // Written while 1–3 wait for their retry: they wait behind them, and do not join them.
    await writeFinished(patient, names('batch-retried-later', 4));
    const calls = await notifications(3);
    expect(calls.map((call) => eventNumbers(call.json))).toEqual([
      [1, 2, 3],
      [1, 2, 3],
      [4, 5, 6, 7],
    ]);
    // The same notification again: the same webhook-id, each body signed as a whole.
    expect(calls[1]!.headers['webhook-id']).toBe(calls[0]!.headers['webhook-id']);
    for (const call of calls) {
      expect(notificationProblems(call.json, { subscriptionId: id, type: 'event-notification', status: 'active', content: 'id-only' })).toEqual([]);
      expect(await verify(secret, call.body.toString('utf8'), call.headers['x-hub-signature'] as string)).toBe(true);
    }
    await untilSettled(id, 7);
    const attempts = await attemptsOf(id);
    expect(attempts.map((row) => [row.event_number, row.attempt, row.outcome, row.http_status])).toEqual([
      [1, 1, 'retrying', 503],
      [2, 1, 'retrying', 503],
      [3, 1, 'retrying', 503],
      [1, 2, 'delivered', 200],
      [2, 2, 'delivered', 200],
      [3, 2, 'delivered', 200],
      [4, 1, 'delivered', 200],
      [5, 1, 'delivered', 200],
      [6, 1, 'delivered', 200],
      [7, 1, 'delivered', 200],
    ]);
  });

  it('refused for good fails all its events, and counts as one refusal', async () => {
    const patient = 'batch-refused';
    const { id, receiver, notifications } = await subscribe(patient, { maxCount: 5 });
    receiver.answer = () => ({ status: 400 });
    await writeFinished(patient, names('batch-refused', 4));
    const [call] = await notifications(1);
    expect(eventNumbers(call!.json)).toEqual([1, 2, 3, 4]);
    await untilSettled(id, 4);
    const { rows } = await t.database.pool.query(
      `SELECT event_number, status, attempts FROM webhook.subscription_events WHERE subscription_id = $1 ORDER BY event_number`,
      [id],
    );
    expect(rows.map((row) => [Number(row.event_number), row.status, row.attempts])).toEqual([1, 2, 3, 4].map((n) => [n, 'failed', 1]));
    // One notification refused: one in a row, not four (DELIVERY_MAX_FAILURES of them deactivate).
    expect(await statusOf(t, id)).toMatchObject({ status: 'active', failure_count: 1 });
    expect(receiver.calls).toHaveLength(2);
  });

  it('is one event when the subscription has no max-count, as before, beside one with 5 on the same writes', async () => {
    const patient = 'batch-default';
    const single = await subscribe(patient);
    const batched = await subscribe(`${patient}-5`, { maxCount: 5 });
    await writeFinished(patient, names('batch-default', 3));
    await writeFinished(`${patient}-5`, names('batch-default-5', 3));
    const singles = await single.notifications(3);
    expect(singles.map((call) => eventNumbers(call.json))).toEqual([[1], [2], [3]]);
    const [together] = await batched.notifications(1);
    expect(eventNumbers(together!.json)).toEqual([1, 2, 3]);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect([single.receiver.calls.length, batched.receiver.calls.length]).toEqual([4, 2]);
  });
});
