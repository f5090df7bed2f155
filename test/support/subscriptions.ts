import { expect } from 'vitest';
import type { TestApp } from './app.ts';
import { waitFor } from './receiver.ts';

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

export type Attempt = { kind: string; attempt: number; outcome: string; http_status: number | null; error: string | null; resource_id: string | null; duration_ms: number };

/** A subscription's recorded attempts (webhook.delivery_attempts), in the order they were recorded. */
export async function attemptsOf(t: TestApp, id: string): Promise<Attempt[]> {
  const { rows } = await t.database.pool.query<Attempt>(
    `SELECT kind, attempt, outcome, http_status, error, resource_id, duration_ms FROM webhook.delivery_attempts WHERE subscription_id = $1 ORDER BY id`,
    [id],
  );
  return rows;
}
