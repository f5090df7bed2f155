import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { closedAtFileEnd, stackWith } from '../support/dispatch-stack.ts';
import { subscribe, untilStatus } from '../support/subscriptions.ts';

const { receiver } = closedAtFileEnd();

describe('Standard Webhooks signatures (WEBHOOK_STANDARD_SIGNATURES=true)', () => {
  const stack = stackWith(() => ({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_RETRY_DELAYS_MS: '50,50', WEBHOOK_STANDARD_SIGNATURES: 'true' }));

  it('every call verifies with the official standardwebhooks library, a retry keeps its webhook-id, and a replayed old call is refused', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Location?status=active', endpoint.url, { header: ['secret: standard-secret-42'] });
    await untilStatus(t, id, 'active');
    endpoint.answer = () => (endpoint.calls.length === 2 ? { status: 500 } : { status: 200 });
    await t.fhir('POST', '/Location', { resourceType: 'Location', status: 'active' });
    const [handshake, first, retry] = await endpoint.waitForCalls(3);

    const webhook = new Webhook('standard-secret-42', { format: 'raw' });
    const headersOf = (call: typeof first) => Object.fromEntries(Object.entries(call!.headers).map(([name, value]) => [name, String(value)]));
    for (const call of [handshake, first, retry]) {
      expect(() => webhook.verify(call!.body.toString('utf8'), headersOf(call))).not.toThrow();
      // X-Hub-Signature is still there, for receivers that check it.
      expect(call!.headers['x-hub-signature']).toMatch(/^sha256=[0-9a-f]{64}$/);
    }
    expect(retry!.headers['webhook-id']).toBe(first!.headers['webhook-id']);
    expect(handshake!.headers['webhook-id']).not.toBe(first!.headers['webhook-id']);

    // A call replayed an hour later: its timestamp is outside the library's tolerance.
    const replayed = { ...headersOf(first), 'webhook-timestamp': String(Number(first!.headers['webhook-timestamp']) - 3600) };
    expect(() => webhook.verify(first!.body.toString('utf8'), replayed)).toThrow(WebhookVerificationError);
    expect(() => new Webhook('another-secret', { format: 'raw' }).verify(first!.body.toString('utf8'), headersOf(first))).toThrow(WebhookVerificationError);
  });
});
