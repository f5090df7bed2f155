import { describe, expect, it } from 'vitest';
import { closedAtFileEnd, stackWith } from '../support/dispatch-stack.ts';
import { waitFor } from '../support/receiver.ts';
import { attemptsOf, statusOf, subscribe, untilStatus } from '../support/subscriptions.ts';

const { receiver } = closedAtFileEnd();

describe('429 with Retry-After', () => {
  const stack = stackWith(() => ({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_RETRY_DELAYS_MS: '50,50' }));

  it('is retried no sooner than Retry-After says, then delivered; failure_count stays 0', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Encounter?status=planned', endpoint.url);
    await untilStatus(t, id, 'active');

    const arrivals: number[] = [];
    endpoint.answer = () => {
      arrivals.push(Date.now());
      return arrivals.length === 1 ? { status: 429, headers: { 'Retry-After': '1' } } : { status: 200 };
    };
    const created = (await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'planned', class: { code: 'AMB' } })).json();
    await endpoint.waitForCalls(2);
    // A retryable failure is the event's business: it does not count against the subscription.
    await waitFor(async () => ((await attemptsOf(t, id)).some((row) => row.outcome === 'retrying') ? true : undefined), 5_000, 'the 429 recorded');
    expect((await statusOf(t, id)).failure_count).toBe(0);

    const calls = await endpoint.waitForCalls(3, 10_000);
    expect(calls[2]!.json).toEqual(created);
    // The Standard Webhooks headers are opt-in (WEBHOOK_STANDARD_SIGNATURES).
    expect(calls[2]!.headers['webhook-id']).toBeUndefined();
    // The retry was scheduled after the 429 answer came back, so at least 1 s after it arrived.
    expect(arrivals[1]! - arrivals[0]!).toBeGreaterThanOrEqual(990);
    await waitFor(
      async () => ((await attemptsOf(t, id)).some((row) => row.outcome === 'delivered' && row.kind === 'notification') ? true : undefined),
      5_000,
      'the delivery recorded',
    );
    expect(await statusOf(t, id)).toMatchObject({ status: 'active', failure_count: 0 });
    expect((await attemptsOf(t, id)).filter((row) => row.kind === 'notification')).toMatchObject([
      { attempt: 1, outcome: 'retrying', http_status: 429, error: 'HTTP 429', resource_id: created.id },
      { attempt: 2, outcome: 'delivered', http_status: 200, error: null, resource_id: created.id },
    ]);
  });
});
