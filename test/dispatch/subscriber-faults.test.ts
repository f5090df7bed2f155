import { createServer, type ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { closedAtFileEnd, stackWith } from '../support/dispatch-stack.ts';
import { waitFor } from '../support/receiver.ts';
import { attemptsOf, statusOf, subscribe, untilStatus } from '../support/subscriptions.ts';

const { listen } = closedAtFileEnd();

describe('response timeout', () => {
  const stack = stackWith(() => ({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_RETRY_DELAYS_MS: '50,50', DELIVERY_RESPONSE_TIMEOUT_MS: '500' }));

  it('a receiver that does not answer in time is a retryable failure; the retry is delivered when it answers', async () => {
    const { t } = stack.current();
    const calls: { json: { resourceType?: string; id?: string } }[] = [];
    const held: ServerResponse[] = [];
    const server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        const json = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceType?: string; id?: string };
        calls.push({ json });
        // The first notification (the call after the handshake) gets no answer at all.
        if (calls.length === 2) held.push(response);
        else response.writeHead(200).end('ok');
      });
    });
    const endpointUrl = `http://127.0.0.1:${await listen(server)}/hook`;
    const { id } = await subscribe(t, 'Encounter?status=arrived', endpointUrl);
    await untilStatus(t, id, 'active');

    const created = (await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'arrived', class: { code: 'AMB' } })).json();
    await waitFor(() => (calls.length >= 3 ? true : undefined), 10_000, 'the retry');
    expect(calls.map(({ json }) => json.id)).toEqual([expect.any(String), created.id, created.id]);
    await waitFor(async () => ((await attemptsOf(t, id)).some((row) => row.outcome === 'delivered' && row.kind === 'notification') ? true : undefined));

    const notifications = (await attemptsOf(t, id)).filter((row) => row.kind === 'notification');
    expect(notifications).toMatchObject([
      { attempt: 1, outcome: 'retrying', http_status: null, resource_id: created.id },
      { attempt: 2, outcome: 'delivered', http_status: 200, error: null, resource_id: created.id },
    ]);
    expect(notifications[0]!.error).toContain('response timeout');
    expect(notifications[0]!.duration_ms).toBeGreaterThanOrEqual(450);
    expect(await statusOf(t, id)).toMatchObject({ status: 'active', failure_count: 0 });
    for (const response of held) response.destroy();
  });
});

describe('subscriber faults', () => {
  const stack = stackWith(() => ({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_RETRY_DELAYS_MS: '50,50', DELIVERY_RESPONSE_TIMEOUT_MS: '500' }));

  /**
   * A subscriber whose first notification meets `fault` (the handshake and any
   * later call are answered 200), the event's attempts once settled, and the
   * calls it received.
   */
  async function faultyDelivery(
    criteria: string,
    resource: Record<string, unknown>,
    fault: (response: ServerResponse) => void,
    settled: (outcomes: string[]) => boolean,
  ) {
    const { t } = stack.current();
    let calls = 0;
    const server = createServer((request, response) => {
      request.resume();
      request.on('end', () => {
        calls++;
        if (calls === 2) fault(response);
        else response.writeHead(200).end('ok');
      });
    });
    const endpoint = `http://127.0.0.1:${await listen(server)}/hook`;
    const { id } = await subscribe(t, criteria, endpoint);
    await untilStatus(t, id, 'active');
    await t.fhir('POST', `/${resource.resourceType as string}`, resource);
    const attempts = await waitFor(
      async () => {
        const notifications = (await attemptsOf(t, id)).filter((row) => row.kind === 'notification');
        return notifications.length > 0 && settled(notifications.map((row) => row.outcome)) ? notifications : undefined;
      },
      10_000,
      'the attempts',
    );
    return { attempts, state: await statusOf(t, id), calls: () => calls };
  }

  it('an answer later than the response budget is a retryable failure, and the retry is delivered', async () => {
    const { attempts, state } = await faultyDelivery(
      'Device?status=active',
      { resourceType: 'Device', status: 'active' },
      (response) => setTimeout(() => response.writeHead(200).end('late'), 1_500),
      (outcomes) => outcomes.includes('delivered'),
    );
    expect(attempts).toMatchObject([{ outcome: 'retrying', http_status: null, error: expect.stringContaining('response timeout') }, { outcome: 'delivered' }]);
    expect(state).toMatchObject({ status: 'active', failure_count: 0 });
  });

  it('a connection reset is a retryable failure, and the retry is delivered', async () => {
    const { attempts } = await faultyDelivery(
      'Device?status=inactive',
      { resourceType: 'Device', status: 'inactive' },
      (response) => response.socket?.destroy(),
      (outcomes) => outcomes.includes('delivered'),
    );
    expect(attempts).toMatchObject([
      { outcome: 'retrying', http_status: null, error: expect.stringMatching(/ECONNRESET|socket|closed/i) },
      { outcome: 'delivered' },
    ]);
  });

  it('a 2xx with an endless body is delivered; the call reads a bounded excerpt and does not wait for the end', async () => {
    const { attempts } = await faultyDelivery(
      'Device?status=entered-in-error',
      { resourceType: 'Device', status: 'entered-in-error' },
      (response) => {
        response.writeHead(200, { 'content-type': 'text/plain' });
        const chunk = 'y'.repeat(16 * 1024);
        const pump = () => {
          while (!response.destroyed && response.write(chunk));
          if (!response.destroyed) response.once('drain', pump);
        };
        pump();
      },
      (outcomes) => outcomes.length > 0,
    );
    expect(attempts).toHaveLength(1);
    expect(attempts[0]).toMatchObject({ outcome: 'delivered', http_status: 200 });
    expect(attempts[0]!.duration_ms).toBeLessThan(500);
    const { rows } = await stack
      .current()
      .t.database.pool.query<{ excerpt: string }>(
        `SELECT response_excerpt AS excerpt FROM webhook.delivery_attempts WHERE kind = 'notification' AND http_status = 200 ORDER BY id DESC LIMIT 1`,
      );
    expect(rows[0]!.excerpt).toBe('y'.repeat(1024));
  });

  it('a 2xx whose body never comes (a huge Content-Length) is delivered when the status says so; the wait ends at the budget', async () => {
    const { attempts } = await faultyDelivery(
      'Device?status=unknown',
      { resourceType: 'Device', status: 'unknown' },
      (response) => {
        response.writeHead(200, { 'content-length': String(10 ** 12) });
        response.write('partial');
      },
      (outcomes) => outcomes.length > 0,
    );
    expect(attempts).toMatchObject([{ outcome: 'delivered', http_status: 200 }]);
  });

  it.each([301, 302, 307])('a %i redirect is a permanent failure and is never followed (a redirect could lead past the SSRF guard)', async (status) => {
    let followed = 0;
    const elsewhere = `http://127.0.0.1:${await listen(createServer((_request, response) => (followed++, response.writeHead(200).end())))}/elsewhere`;
    const code = `redirect-${status}`;
    const { attempts, state } = await faultyDelivery(
      `Device?type=${code}`,
      { resourceType: 'Device', type: { coding: [{ code }] } },
      (response) => response.writeHead(status, { location: elsewhere }).end(),
      (outcomes) => outcomes.length > 0,
    );
    expect(attempts).toMatchObject([{ attempt: 1, outcome: 'failed', http_status: status, error: `HTTP ${status}` }]);
    // One event refused for good: counted, not yet enough to deactivate.
    expect(state).toMatchObject({ status: 'active', failure_count: 1 });
    expect(followed).toBe(0);
  });
});
