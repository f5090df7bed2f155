import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { maxParallelCalls } from '../../src/subscriptions/requests.ts';
import { baseUrl, type TestApp } from '../support/app.ts';
import { eventNumbers } from '../support/backport-conformance.ts';
import { untilDelivered, untilStatus } from '../support/subscriptions.ts';
import { backportIg, exampleTopicUrl, startTopicStack, type TopicStack } from '../support/topics.ts';

/**
 * Calls in flight per subscription (issue 26, item 7): a topic-based
 * subscription's notifications go one at a time, in event-number order, the
 * next call starting once the one before was answered, as the Backport IG's
 * receivers expect; the parallel-calls extension on channel lets a
 * subscription, topic-based or classic, have another number in flight at
 * once, within DELIVERY_PARALLEL_CALLS. Real receivers on loopback, each
 * answering after a random delay, record the event numbers in the order they
 * arrive and the most calls they held at once.
 */

let t: TestApp;
let stack: TopicStack;

const topicUrl = exampleTopicUrl;
const ig = backportIg;
const parallelCalls = `${baseUrl}/fhir/resources/StructureDefinition/parallel-calls`;
/** What the service lets a classic subscription have in flight when it does not say. */
const serviceParallelCalls = 8;
/** Events written at once: more than any number of lanes here, fewer than a claim's 100. */
const events = 30;

beforeAll(async () => {
  stack = await startTopicStack({ DELIVERY_PARALLEL_CALLS: String(serviceParallelCalls), DELIVERY_RETRY_DELAYS_MS: '100', DELIVERY_MAX_FAILURES: '3' });
  t = stack.t;
});
afterAll(() => stack?.close());

/** A receiver and what it saw: the event numbers in arrival order (topic-based notifications), the calls after the handshake, the most held at once. */
type Watched = { url: string; arrivals: number[]; notifications: () => number; mostAtOnce: () => number };

/**
 * A receiver that answers each call after a random delay of `delayMs`, and
 * 503 to the first call of the event numbered `failOnce`.
 */
async function watchingReceiver({ delayMs: [least, most], failOnce }: { delayMs: [number, number]; failOnce?: number }): Promise<Watched> {
  const receiver = await stack.receiver();
  const arrivals: number[] = [];
  let inFlight = 0;
  let mostAtOnce = 0;
  let failing = failOnce;
  receiver.answer = (call) => {
    inFlight += 1;
    mostAtOnce = Math.max(mostAtOnce, inFlight);
    const delayMs = least + Math.floor(Math.random() * (most - least + 1));
    // Set before the receiver's own timer of the same delay, so it runs first: a call is held until its answer is written.
    setTimeout(() => (inFlight -= 1), delayMs);
    // A handshake carries no event; a classic notification is the resource itself.
    const [number] = eventNumbers(call.json);
    if (number === undefined) return { status: 200, delayMs };
    arrivals.push(number);
    if (number !== failing) return { status: 200, delayMs };
    failing = undefined;
    return { status: 503, delayMs };
  };
  return { url: receiver.url, arrivals, notifications: () => receiver.calls.length - 1, mostAtOnce: () => mostAtOnce };
}

function topicSubscription(patient: string, endpoint: string, channelExtensions: unknown[] = []) {
  return {
    resourceType: 'Subscription',
    status: 'requested',
    reason: 'event order',
    criteria: topicUrl,
    _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: `Encounter?patient=Patient/${patient}` }] },
    channel: {
      ...(channelExtensions.length === 0 ? {} : { extension: channelExtensions }),
      type: 'rest-hook',
      endpoint,
      payload: 'application/fhir+json',
      _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'id-only' }] },
      header: ['secret: order-secret'],
    },
  };
}

function classicSubscription(family: string, endpoint: string, channelExtensions: unknown[] = []) {
  return {
    resourceType: 'Subscription',
    status: 'requested',
    reason: 'calls in flight',
    criteria: `Patient?family=${family}`,
    channel: {
      ...(channelExtensions.length === 0 ? {} : { extension: channelExtensions }),
      type: 'rest-hook',
      endpoint,
      payload: 'application/fhir+json',
      header: ['secret: order-secret'],
    },
  };
}

/** Creates the subscription and waits for its handshake to make it active. */
async function activeSubscription(body: unknown): Promise<string> {
  const response = await t.fhir('POST', '/Subscription', body);
  expect(response.statusCode, response.body).toBe(201);
  const { id } = response.json<{ id: string }>();
  await untilStatus(t, id, 'active');
  return id;
}

/** `events` finished Encounters of the patient, in one SQL statement (a loader's): an event each. */
async function finishEncounters(patient: string): Promise<void> {
  await t.database.pool.query(
    `INSERT INTO fhir.resources (content)
     SELECT jsonb_build_object('resourceType', 'Encounter', 'id', $1 || '-' || n, 'status', 'finished',
                               'class', jsonb_build_object('code', 'AMB'), 'subject', jsonb_build_object('reference', 'Patient/' || $1))
     FROM generate_series(1, $2::int) n`,
    [patient, events],
  );
}

/** `events` Patients of the family, in one SQL statement: an event each for a classic subscription on it. */
async function writePatients(family: string): Promise<void> {
  await t.database.pool.query(
    `INSERT INTO fhir.resources (content)
     SELECT jsonb_build_object('resourceType', 'Patient', 'id', $1 || '-' || n, 'name', jsonb_build_array(jsonb_build_object('family', $1)))
     FROM generate_series(1, $2::int) n`,
    [family, events],
  );
}

/** Waits until every event of the subscription is delivered: nothing more is coming. */
const untilAllDelivered = (id: string, count = events) => untilDelivered(t, id, count, 20_000);

const oneTo = (count: number) => Array.from({ length: count }, (_, index) => index + 1);

describe('a topic-based subscription', () => {
  it(`gets ${events} events of one statement one call at a time, in event-number order, though the service allows ${serviceParallelCalls} at once`, async () => {
    const receiver = await watchingReceiver({ delayMs: [0, 15] });
    const id = await activeSubscription(topicSubscription('in-order', receiver.url));
    await finishEncounters('in-order');
    await untilAllDelivered(id);
    expect(receiver.arrivals).toEqual(oneTo(events));
    expect(receiver.mostAtOnce()).toBe(1);
  });

  it('after a retryable failure, gets the failed event again first and the events after it in order (from a transaction Bundle)', async () => {
    const failed = 7;
    const receiver = await watchingReceiver({ delayMs: [0, 15], failOnce: failed });
    const id = await activeSubscription(topicSubscription('retried', receiver.url));
    const entry = {
      resource: { resourceType: 'Encounter', status: 'finished', class: { code: 'AMB' }, subject: { reference: 'Patient/retried' } },
      request: { method: 'POST', url: 'Encounter' },
    };
    const written = await t.fhir('POST', '/Bundle', { resourceType: 'Bundle', type: 'transaction', entry: oneTo(events).map(() => entry) });
    expect(written.statusCode, written.body).toBe(200);
    await untilAllDelivered(id);
    // The calls after the failed one waited for its retry (DELIVERY_RETRY_DELAYS_MS, 100 ms) instead of going on without it.
    expect(receiver.arrivals).toEqual([...oneTo(failed), ...oneTo(events).slice(failed - 1)]);
    expect(receiver.mostAtOnce()).toBe(1);
  });

  it('with parallel-calls 4, has up to 4 calls in flight at once, every event delivered', async () => {
    // Answers slow enough that the lanes are all busy at some point.
    const receiver = await watchingReceiver({ delayMs: [20, 40] });
    const id = await activeSubscription(topicSubscription('four-lanes', receiver.url, [{ url: parallelCalls, valuePositiveInt: 4 }]));
    await finishEncounters('four-lanes');
    await untilAllDelivered(id);
    expect(receiver.arrivals.toSorted((a, b) => a - b)).toEqual(oneTo(events));
    expect(receiver.mostAtOnce()).toBeGreaterThan(1);
    expect(receiver.mostAtOnce()).toBeLessThanOrEqual(4);
  });

  it(`asking for ${maxParallelCalls}, more than DELIVERY_PARALLEL_CALLS (${serviceParallelCalls}), gets no more than that`, async () => {
    const receiver = await watchingReceiver({ delayMs: [20, 40] });
    const id = await activeSubscription(topicSubscription('capped', receiver.url, [{ url: parallelCalls, valuePositiveInt: maxParallelCalls }]));
    await finishEncounters('capped');
    await untilAllDelivered(id);
    expect(receiver.mostAtOnce()).toBeGreaterThan(4);
    expect(receiver.mostAtOnce()).toBeLessThanOrEqual(serviceParallelCalls);
  });
});

describe('a classic subscription', () => {
  it(`has up to DELIVERY_PARALLEL_CALLS (${serviceParallelCalls}) calls in flight by default, and one at a time with parallel-calls 1`, async () => {
    const byDefault = await watchingReceiver({ delayMs: [20, 40] });
    const oneLane = await watchingReceiver({ delayMs: [0, 15] });
    const many = await activeSubscription(classicSubscription('Lanes', byDefault.url));
    const one = await activeSubscription(classicSubscription('OneLane', oneLane.url, [{ url: parallelCalls, valuePositiveInt: 1 }]));
    await writePatients('Lanes');
    await writePatients('OneLane');
    await untilAllDelivered(many);
    await untilAllDelivered(one);
    expect([byDefault.notifications(), oneLane.notifications()]).toEqual([events, events]);
    // More than a topic-based subscription's opt-in above: the service's default applies.
    expect(byDefault.mostAtOnce()).toBeGreaterThan(4);
    expect(byDefault.mostAtOnce()).toBeLessThanOrEqual(serviceParallelCalls);
    expect(oneLane.mostAtOnce()).toBe(1);
  });
});

describe('the parallel-calls extension', () => {
  it('is echoed on channel as stored, on create and on read', async () => {
    const created = await t.fhir(
      'POST',
      '/Subscription',
      topicSubscription('echoed', 'http://127.0.0.1:9/none', [{ url: parallelCalls, valuePositiveInt: maxParallelCalls }]),
    );
    expect(created.statusCode, created.body).toBe(201);
    expect(created.json().channel.extension).toEqual([{ url: parallelCalls, valuePositiveInt: maxParallelCalls }]);
    const read = (await t.fhir('GET', `/Subscription/${created.json().id}`)).json().resource;
    expect(read.channel.extension).toEqual([{ url: parallelCalls, valuePositiveInt: maxParallelCalls }]);
    const { rows } = await t.database.pool.query(`SELECT parallel_calls FROM webhook.subscriptions WHERE id = $1`, [created.json().id]);
    expect(rows).toEqual([{ parallel_calls: maxParallelCalls }]);
  });

  it.each([
    ['0', [{ url: parallelCalls, valuePositiveInt: 0 }], `channel's parallel-calls must be a valuePositiveInt from 1 to ${maxParallelCalls}`],
    [
      `${maxParallelCalls + 1}`,
      [{ url: parallelCalls, valuePositiveInt: maxParallelCalls + 1 }],
      `channel's parallel-calls must be a valuePositiveInt from 1 to ${maxParallelCalls}`,
    ],
    ['a fraction', [{ url: parallelCalls, valuePositiveInt: 2.5 }], `channel's parallel-calls must be a valuePositiveInt from 1 to ${maxParallelCalls}`],
    ['a string', [{ url: parallelCalls, valuePositiveInt: '4' }], `channel's parallel-calls must be a valuePositiveInt from 1 to ${maxParallelCalls}`],
    ['another value type', [{ url: parallelCalls, valueInteger: 4 }], 'parallel-calls needs a valuePositiveInt'],
    [
      'two of them',
      [
        { url: parallelCalls, valuePositiveInt: 2 },
        { url: parallelCalls, valuePositiveInt: 3 },
      ],
      'parallel-calls is given 2 times',
    ],
  ])('is refused with a 400 naming it when it is %s, on a topic-based and a classic subscription', async (name, extensions, reason) => {
    const named = name.replaceAll(' ', '-');
    for (const body of [
      topicSubscription(`refused-${named}`, 'http://127.0.0.1:9/none', extensions),
      classicSubscription(`Refused-${named}`, 'http://127.0.0.1:9/none', extensions),
    ]) {
      const refused = await t.fhir('POST', '/Subscription', body);
      expect(refused.statusCode).toBe(400);
      expect(refused.json()).toMatchObject({ resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'exception' }] });
      expect(refused.json().issue[0].details.text).toContain(reason);
    }
  });
});
