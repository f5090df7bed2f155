import pino from 'pino';
import { expect } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers } from '../../src/dispatch/worker.ts';
import { baseUrl, testSecretsKey, type TestApp } from './app.ts';
import { startReceiver, waitFor } from './receiver.ts';

export type SubscribeOptions = { header?: string[]; contact?: string };

/** Creates a subscription through the API (status requested; its handshake is then the workers'). */
export async function subscribe(
  t: TestApp,
  criteria: string,
  endpoint: string,
  { header = ['secret: top-secret'], contact = 'ops@example.org' }: SubscribeOptions = {},
): Promise<{ id: string }> {
  const response = await t.fhir('POST', '/Subscription', {
    resourceType: 'Subscription',
    status: 'requested',
    criteria,
    reason: 'test',
    channel: { type: 'rest-hook', endpoint, payload: 'application/fhir+json', header },
    contact: [{ system: 'email', value: contact }],
  });
  expect(response.statusCode).toBe(201);
  return response.json<{ id: string }>();
}

export type SubscriptionState = { status: string; error: string | null; failure_count: number };

export async function statusOf(t: TestApp, id: string): Promise<SubscriptionState> {
  const { rows } = await t.database.pool.query<SubscriptionState>('SELECT status, error, failure_count FROM webhook.subscriptions WHERE id = $1', [id]);
  return rows[0]!;
}

export const untilStatus = (t: TestApp, id: string, status: string, timeoutMs = 10_000) =>
  waitFor(async () => ((await statusOf(t, id)).status === status ? true : undefined), timeoutMs, `status ${status}`);

/** Waits until exactly `count` of the subscription's events are delivered (webhook.subscription_events). */
export async function untilDelivered(t: TestApp, id: string, count: number, timeoutMs = 10_000): Promise<void> {
  await waitFor(
    async () => {
      const { rows } = await t.database.pool.query<{ delivered: number }>(
        `SELECT count(*)::int AS delivered FROM webhook.subscription_events WHERE subscription_id = $1 AND status = 'delivered'`,
        [id],
      );
      return rows[0]!.delivered === count ? true : undefined;
    },
    timeoutMs,
    `${count} events delivered`,
  );
}

export type Attempt = {
  kind: string;
  attempt: number;
  outcome: string;
  http_status: number | null;
  error: string | null;
  resource_id: string | null;
  duration_ms: number;
};

/** A subscription's recorded attempts (webhook.delivery_attempts), in the order they were recorded. */
export async function attemptsOf(t: TestApp, id: string): Promise<Attempt[]> {
  const { rows } = await t.database.pool.query<Attempt>(
    `SELECT kind, attempt, outcome, http_status, error, resource_id, duration_ms FROM webhook.delivery_attempts WHERE subscription_id = $1 ORDER BY id`,
    [id],
  );
  return rows;
}

export type HealthyAndFailing = {
  /** The subscription whose subscriber answers 200. */
  healthy: string;
  /** The one in error: its subscriber passed the handshake, then refused the one event written for it. */
  failing: string;
  /** Stops the workers (events written afterwards wait in the queue); the next call does nothing. */
  stopWorkers(): Promise<void>;
  /** The workers and both subscribers. */
  close(): Promise<void>;
};

/**
 * What the operator's views are tried on: workers on `t`'s database (one
 * failed call puts a subscription in error), a subscription to a subscriber
 * that answers 200, and one in error, its subscriber having answered
 * `failingStatus` to the event `Patient?family=Failing` that this writes.
 */
export async function startHealthyAndFailing(
  t: TestApp,
  {
    healthyCriteria,
    healthyEndpointQuery = '',
    healthyHeader,
    failingStatus,
  }: { healthyCriteria: string; healthyEndpointQuery?: string; healthyHeader?: string[]; failingStatus: number },
): Promise<HealthyAndFailing> {
  const workers = await startWorkers(
    loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_MAX_FAILURES: '1' }),
    t.database,
    testSecretsKey,
    pino({ level: 'silent' }),
  );
  const good = await startReceiver();
  const bad = await startReceiver();
  // The handshake (a Bundle) passes; every notification fails.
  bad.answer = (call) => ({ status: call.json.resourceType === 'Bundle' ? 200 : failingStatus });
  const healthy = (await subscribe(t, healthyCriteria, `${good.url}${healthyEndpointQuery}`, healthyHeader === undefined ? {} : { header: healthyHeader })).id;
  const failing = (await subscribe(t, 'Patient?family=Failing', bad.url)).id;
  await untilStatus(t, healthy, 'active');
  await untilStatus(t, failing, 'active');
  await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Failing' }] });
  await untilStatus(t, failing, 'error');
  let stopped: Promise<void> | undefined;
  const stopWorkers = () => (stopped ??= workers.stop());
  return {
    healthy,
    failing,
    stopWorkers,
    close: async () => {
      await stopWorkers();
      await good.close();
      await bad.close();
    },
  };
}
