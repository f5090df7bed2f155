import { createServer } from 'node:http';
import { describe, expect, it } from 'vitest';
import { closedAtFileEnd, stackWith } from '../support/dispatch-stack.ts';
import { statusOf, subscribe, untilStatus } from '../support/subscriptions.ts';

const { listen } = closedAtFileEnd();

describe('secrets in what a receiver answers and in the endpoint', () => {
  const stack = stackWith(() => ({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_RETRY_DELAYS_MS: '50,50' }));

  it('a receiver that echoes its request headers leaves no header value, and no endpoint credential, in the records', async () => {
    const { t } = stack.current();
    // Answers 400 (the handshake fails at once) with the request's headers in its body, padded so that the secret straddles the excerpt's 1,024-character end.
    const port = await listen(
      createServer((request, response) => {
        request.resume();
        request.on('end', () => {
          const echoed = JSON.stringify(request.headers);
          response.writeHead(400).end(`${'x'.repeat(Math.max(0, 1_020 - echoed.indexOf('s3cret')))}${echoed}`);
        });
      }),
    );
    const secrets = ['s3cret-value-1234', 'tok-abcdef-9876', 'pw-5678', 'qs-token-4321'];
    const endpoint = `http://bob:pw-5678@127.0.0.1:${port}/hook?token=qs-token-4321`;
    const { id } = await subscribe(t, 'Patient?active=true', endpoint, { header: ['secret: s3cret-value-1234', 'Authorization: Bearer tok-abcdef-9876'] });
    await untilStatus(t, id, 'error');
    const { rows } = await t.database.pool.query<{ excerpt: string | null; error: string | null }>(
      'SELECT response_excerpt AS excerpt, error FROM webhook.delivery_attempts WHERE subscription_id = $1',
      [id],
    );
    expect(rows.length).toBeGreaterThan(0);
    // Redacted before the excerpt is cut: a secret cut in two leaves no part of itself.
    expect(rows.every((row) => row.excerpt?.endsWith('[red'))).toBe(true);
    const recorded = JSON.stringify({ rows, status: await statusOf(t, id) });
    for (const secret of secrets) expect(recorded, secret).not.toContain(secret);
    expect(recorded).toContain(`http://***:***@127.0.0.1:${port}/hook?token=***`);
  });
});
