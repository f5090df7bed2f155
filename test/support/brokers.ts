import { readFileSync } from 'node:fs';
import pino from 'pino';
import { expect } from 'vitest';
import { backportChannelType, channelTypeSystem } from '../../src/channels/registry.ts';
import type { Brokers } from '../../src/config/brokers.ts';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers } from '../../src/dispatch/worker.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { retryPolicyExtension } from '../../src/subscriptions/retry-policy.ts';
import { addTopics } from '../../src/topics/store.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from './app.ts';
import { waitFor } from './receiver.ts';
import { attemptsOf, statusOf, type Attempt } from './subscriptions.ts';

/**
 * What the broker channels' tests (test/channels/nats-jetstream/,
 * test/channels/rabbitmq/) share: a service with the operator's brokers and
 * the example topic, its workers sending; subscriptions to finished
 * encounters through a broker channel, with a retry policy of their own.
 */

/** The example topic (examples/topics/encounter-complete.json): an Encounter finished. */
export const topicUrl = 'http://example.org/topics/encounter-complete';
const ig = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';

export type BrokerTestApp = { t: TestApp; close(): Promise<void> };

/** The API and workers of a test file, with `brokers` as BROKERS and the example topic stored; `settings` as the environment's. */
export async function startBrokerTestApp(brokers: Brokers, settings: Record<string, string> = {}): Promise<BrokerTestApp> {
  const config = loadConfig({ BROKERS: JSON.stringify(brokers), BASE_URL: baseUrl, ...settings });
  const t = await startTestApp({ outbound: { delivery: config.delivery, oauth: undefined, metrics: createMetrics() } });
  await addTopics(t.database.db, [JSON.parse(readFileSync(new URL('../../examples/topics/encounter-complete.json', import.meta.url), 'utf8'))]);
  const workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
  return {
    t,
    close: async () => {
      await workers.stop();
      await t.close();
    },
  };
}

/** Subscription.channel of a broker channel: R4's message, the custom type `code` in the Backport IG's extension. */
export const brokerChannel = (code: 'nats-jetstream' | 'rabbitmq', endpoint: string, more: Record<string, unknown> = {}) => ({
  type: 'message',
  _type: { extension: [{ url: backportChannelType, valueCoding: { system: channelTypeSystem(baseUrl), code } }] },
  endpoint,
  payload: 'application/fhir+json',
  _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'id-only' }] },
  ...more,
});

/** A topic-based subscription to the encounters of `patient` finished, through `channel`, with `extension` (a retry policy) when given. */
export const brokerSubscription = (patient: string, channel: Record<string, unknown>, extension: unknown[] = []) => ({
  resourceType: 'Subscription',
  status: 'requested',
  reason: `${String(channel.endpoint)} for ${patient}`,
  criteria: topicUrl,
  ...(extension.length === 0 ? {} : { extension }),
  _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: `Encounter?patient=Patient/${patient}` }] },
  channel,
});

/** The service's retry-policy extension: `maxAttempts`, and a backoff from `firstDelayMs` growing by `growth` up to `maxDelaySeconds` when given. */
export function retryPolicy(maxAttempts: number, backoff?: { firstDelayMs: number; growth: number; maxDelaySeconds: number }) {
  const ucum = 'http://unitsofmeasure.org';
  return {
    url: retryPolicyExtension(baseUrl),
    extension: [
      { url: 'maxAttempts', valuePositiveInt: maxAttempts },
      ...(backoff === undefined
        ? []
        : [
            { url: 'firstDelay', valueDuration: { value: backoff.firstDelayMs, system: ucum, code: 'ms' } },
            { url: 'growth', valueDecimal: backoff.growth },
            { url: 'maxDelay', valueDuration: { value: backoff.maxDelaySeconds, system: ucum, code: 's' } },
          ]),
    ],
  };
}

/** An Encounter `id` of `patient`, finished: the example topic's event. */
export const finishedEncounter = (id: string, patient: string) => ({
  resourceType: 'Encounter',
  id,
  status: 'finished',
  class: { code: 'AMB' },
  subject: { reference: `Patient/${patient}` },
});

/** Creates the subscription through the API; its id. */
export async function subscribed(t: TestApp, subscription: Record<string, unknown>): Promise<string> {
  const response = await t.fhir('POST', '/Subscription', subscription);
  expect(response.statusCode, response.body).toBe(201);
  return response.json<{ id: string }>().id;
}

/** The subscription's attempts once one of them is `outcome`. */
export const untilAttempt = (t: TestApp, id: string, outcome: Attempt['outcome'], timeoutMs = 15_000) =>
  waitFor(async () => (await attemptsOf(t, id)).find((attempt) => attempt.outcome === outcome), timeoutMs, `an attempt ${outcome}`);

/** The subscription's attempts once there are at least `count`. */
export const untilAttempts = (t: TestApp, id: string, count: number, timeoutMs = 10_000) =>
  waitFor(
    async () => {
      const recorded = await attemptsOf(t, id);
      return recorded.length >= count ? recorded : undefined;
    },
    timeoutMs,
    `${count} attempts recorded`,
  );

/** The subscription's status now. */
export const currentStatus = async (t: TestApp, id: string) => (await statusOf(t, id)).status;
