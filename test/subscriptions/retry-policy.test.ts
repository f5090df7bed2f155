import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { hapiRetryCountExtension, medplumMaxAttemptsExtension, retryPolicyExtension } from '../../src/subscriptions/retry-policy.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { startReceiver, type Receiver } from '../support/receiver.ts';
import { attemptsOf, untilStatus } from '../support/subscriptions.ts';

/**
 * A retry policy per subscription (src/subscriptions/retry-policy.ts): its
 * attempts and its backoff in place of DELIVERY_MAX_FAILURES and
 * DELIVERY_RETRY_DELAYS_MS, said with the service's extension or HAPI's and
 * Medplum's, within the operator's RETRY_POLICY_* bounds; against real
 * receivers that refuse with 500.
 */

const settings = { DELIVERY_RETRY_DELAYS_MS: '100', RETRY_POLICY_MIN_DELAY_MS: '100', RETRY_POLICY_MAX_DELAY_MS: '60000', RETRY_POLICY_MAX_ATTEMPTS: '6' };
const config = loadConfig({ ...settings, BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });

let t: TestApp;
let workers: Workers;
const receivers: Receiver[] = [];

beforeAll(async () => {
  t = await startTestApp({ outbound: { delivery: config.delivery, oauth: undefined, metrics: createMetrics() } });
  workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
});
afterAll(async () => {
  await workers.stop();
  for (const receiver of receivers) await receiver.close();
  await t.close();
});

const policy = (...parts: Record<string, unknown>[]) => ({ url: retryPolicyExtension(baseUrl), extension: parts });
const milliseconds = (value: number) => ({ value, system: 'http://unitsofmeasure.org', code: 'ms' });

const subscription = (criteria: string, endpoint: string, extension: unknown[], channelExtension: unknown[] = []) => ({
  resourceType: 'Subscription',
  status: 'requested',
  criteria,
  reason: 'retry policy',
  ...(extension.length === 0 ? {} : { extension }),
  channel: { type: 'rest-hook', endpoint, payload: 'application/fhir+json', ...(channelExtension.length === 0 ? {} : { extension: channelExtension }) },
});

/** A receiver that passes the handshake, then refuses every notification with 500. */
async function refusingReceiver(): Promise<Receiver> {
  const receiver = await startReceiver();
  receiver.answer = (call) => ({ status: call.json.type === 'history' && JSON.stringify(call.json).includes('handshake') ? 200 : 500 });
  receivers.push(receiver);
  return receiver;
}

/** A subscription made through the API, active after its handshake. */
async function activeSubscription(criteria: string, extension: unknown[]): Promise<string> {
  const receiver = await refusingReceiver();
  const response = await t.fhir('POST', '/Subscription', subscription(criteria, receiver.url, extension));
  expect(response.statusCode, response.body).toBe(201);
  const { id } = response.json<{ id: string }>();
  await untilStatus(t, id, 'active');
  return id;
}

const notificationAttempts = async (id: string) => (await attemptsOf(t, id)).filter((attempt) => attempt.kind === 'notification');

describe('a retry policy per subscription', () => {
  it("ends in error after the subscription's own attempts, where the service's setting takes three", async () => {
    const once = await activeSubscription('Patient?family=Once', [policy({ url: 'maxAttempts', valuePositiveInt: 1 })]);
    const byDefault = await activeSubscription('Patient?family=Default', []);
    await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Once' }] });
    await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Default' }] });
    await untilStatus(t, once, 'error');
    await untilStatus(t, byDefault, 'error');
    expect((await notificationAttempts(once)).map((attempt) => attempt.outcome)).toEqual(['failed']);
    expect((await notificationAttempts(byDefault)).map((attempt) => attempt.outcome)).toEqual(['retrying', 'retrying', 'failed']);
  });

  it('spaces the attempts by its backoff: each delay the one before it times its growth, jittered by 20% at most', { timeout: 20_000 }, async () => {
    // Longer than the senders' 1 s poll, which picks up a retry come due: the service's 100 ms delays give gaps of about 1 s.
    const spaced = await activeSubscription('Patient?family=Spaced', [
      policy(
        { url: 'maxAttempts', valuePositiveInt: 3 },
        { url: 'firstDelay', valueDuration: { value: 2, system: 'http://unitsofmeasure.org', code: 's' } },
        { url: 'growth', valueDecimal: 2 },
        { url: 'maxDelay', valueDuration: milliseconds(5_000) },
      ),
    ]);
    await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Spaced' }] });
    await untilStatus(t, spaced, 'error', 15_000);
    const { rows } = await t.database.pool.query<{ started_at: Date }>(
      `SELECT started_at FROM webhook.delivery_attempts WHERE subscription_id = $1 AND kind = 'notification' ORDER BY started_at`,
      [spaced],
    );
    expect(rows).toHaveLength(3);
    const gaps = rows.slice(1).map((row, index) => row.started_at.getTime() - rows[index]!.started_at.getTime());
    // 2 s, then 4 s (under the 5 s maxDelay): no attempt before its delay, jittered down by 20% at most.
    expect(gaps[0]).toBeGreaterThanOrEqual(2_000 * 0.8);
    expect(gaps[1]).toBeGreaterThanOrEqual(4_000 * 0.8);
  });

  it('honours its attempts in the handshake too: one refused handshake puts it in error when it asks for one attempt', async () => {
    const receiver = await startReceiver();
    receivers.push(receiver);
    receiver.answer = () => ({ status: 503 });
    const response = await t.fhir(
      'POST',
      '/Subscription',
      subscription('Patient?family=Shy', receiver.url, [{ url: medplumMaxAttemptsExtension, valueInteger: 1 }]),
    );
    expect(response.statusCode).toBe(201);
    const { id } = response.json<{ id: string }>();
    await untilStatus(t, id, 'error');
    expect((await attemptsOf(t, id)).map((attempt) => [attempt.kind, attempt.outcome])).toEqual([['handshake', 'failed']]);
  });

  it("takes HAPI's retry count (retries after the first attempt, on the Subscription or its channel) and Medplum's max attempts, and shows the service's extension", async () => {
    const receiver = await startReceiver();
    receivers.push(receiver);
    const shown = async (body: unknown) => {
      const response = await t.fhir('POST', '/Subscription', body);
      expect(response.statusCode, response.body).toBe(201);
      const read = await t.fhir('GET', `/Subscription/${response.json<{ id: string }>().id}`);
      // The specification's read envelope holds the resource.
      return read.json<{ resource: { extension?: unknown[] } }>().resource.extension;
    };
    const attempts = (count: number) => [{ url: retryPolicyExtension(baseUrl), extension: [{ url: 'maxAttempts', valuePositiveInt: count }] }];
    expect(await shown(subscription('Patient?family=Hapi', receiver.url, [{ url: hapiRetryCountExtension, valueInteger: 0 }]))).toEqual(attempts(1));
    expect(await shown(subscription('Patient?family=HapiChannel', receiver.url, [], [{ url: hapiRetryCountExtension, valueInteger: 4 }]))).toEqual(attempts(5));
    expect(await shown(subscription('Patient?family=Medplum', receiver.url, [{ url: medplumMaxAttemptsExtension, valueInteger: 2 }]))).toEqual(attempts(2));
    expect(await shown(subscription('Patient?family=Plain', receiver.url, []))).toBeUndefined();
  });

  it.each([
    [
      'more attempts than the operator allows',
      [policy({ url: 'maxAttempts', valuePositiveInt: 7 })],
      'this service allows at most 6 (RETRY_POLICY_MAX_ATTEMPTS)',
    ],
    ["Medplum's attempts past the bound", [{ url: medplumMaxAttemptsExtension, valueInteger: 18 }], 'subscription-max-attempts asks for 18 attempts'],
    [
      'a first delay under the bound',
      [policy({ url: 'firstDelay', valueDuration: milliseconds(10) })],
      'waits at least 100 ms between attempts (RETRY_POLICY_MIN_DELAY_MS)',
    ],
    [
      'a longest delay over the bound',
      [
        policy(
          { url: 'firstDelay', valueDuration: milliseconds(500) },
          { url: 'maxDelay', valueDuration: { value: 2, system: 'http://unitsofmeasure.org', code: 'min' } },
        ),
      ],
      'waits at most 60000 ms between attempts (RETRY_POLICY_MAX_DELAY_MS)',
    ],
    ['a growth without a first delay', [policy({ url: 'growth', valueDecimal: 2 })], 'growth and maxDelay need its firstDelay'],
    [
      'a growth past 10',
      [policy({ url: 'firstDelay', valueDuration: milliseconds(500) }, { url: 'growth', valueDecimal: 11 })],
      'growth must be between 1 and 10',
    ],
    ['a duration in an unknown unit', [policy({ url: 'firstDelay', valueDuration: { value: 1, code: 'wk' } })], 'a UCUM code among ms, s, min, h, d'],
    [
      "HAPI's and Medplum's numbers that disagree",
      [
        { url: hapiRetryCountExtension, valueInteger: 2 },
        { url: medplumMaxAttemptsExtension, valueInteger: 2 },
      ],
      'subscription-delivery-retry-count (3 attempts) and subscription-max-attempts (2 attempts) say different numbers of attempts',
    ],
    ['a part it does not know', [policy({ url: 'jitter', valueDecimal: 0.1 })], 'a part this service does not know: jitter'],
  ])('refuses %s with a 400 naming it', async (_what, extension, message) => {
    const response = await t.fhir('POST', '/Subscription', subscription('Patient?family=Refused', 'http://127.0.0.1:9/hook', extension));
    expect(response.statusCode).toBe(400);
    expect(response.json<{ issue: { details: { text: string } }[] }>().issue[0]!.details.text).toContain(message);
  });
});
