import { createServer } from 'node:http';
import { beforeAll, describe, expect, it } from 'vitest';
import { closedAtFileEnd, stackWith } from '../support/dispatch-stack.ts';
import { waitFor } from '../support/receiver.ts';
import { attemptsOf, statusOf, subscribe, untilStatus } from '../support/subscriptions.ts';

const { listen, receiver } = closedAtFileEnd();

/** A client-credentials token endpoint on 127.0.0.1 that answers with `answer` and records each form. */
async function startTokenEndpoint(answer: (calls: number) => { status: number; body: unknown }) {
  const forms: URLSearchParams[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      forms.push(new URLSearchParams(Buffer.concat(chunks).toString('utf8')));
      const { status, body } = answer(forms.length);
      response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
  });
  const port = await listen(server);
  return { url: `http://127.0.0.1:${port}/oauth2/token`, forms };
}

const clientId = 'webhook-dispatcher';
const clientSecret = 'client-secret-that-must-not-leak';

const oauthEnvironment = (tokenUrl: string) => ({
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
  DELIVERY_RETRY_DELAYS_MS: '50,50',
  OAUTH_TOKEN_URL: tokenUrl,
  OAUTH_CLIENT_ID: clientId,
  OAUTH_CLIENT_SECRET: clientSecret,
});

describe('OAuth client credentials', () => {
  let tokenEndpoint: Awaited<ReturnType<typeof startTokenEndpoint>>;
  beforeAll(async () => {
    tokenEndpoint = await startTokenEndpoint((n) => ({ status: 200, body: { access_token: `token-${n}`, token_type: 'Bearer', expires_in: 3600 } }));
  });
  const stack = stackWith(() => oauthEnvironment(tokenEndpoint.url));

  it('sends the bearer token on the handshake and the notification, replacing the client Authorization; one token request for both', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Appointment?status=booked', endpoint.url, { header: ['secret: top-secret', 'Authorization: Basic xyz'] });
    const [handshake] = await endpoint.waitForCalls(1);
    expect(handshake!.json).toMatchObject({ resourceType: 'Bundle', type: 'history' });
    // Node keeps the first of duplicate Authorization headers: had the client's one been sent too, it would show here.
    expect(handshake!.headers.authorization).toBe('Bearer token-1');
    await untilStatus(t, id, 'active');

    const created = (
      await t.fhir('POST', '/Appointment', {
        resourceType: 'Appointment',
        status: 'booked',
        start: '2026-03-02T09:00:00Z',
        end: '2026-03-02T09:30:00Z',
        participant: [{ actor: { reference: 'Practitioner/oauth-doc' }, status: 'accepted' }],
      })
    ).json();
    const [, notification] = await endpoint.waitForCalls(2);
    expect(notification!.json).toEqual(created);
    expect(notification!.headers.authorization).toBe('Bearer token-1');
    expect(notification!.headers.secret).toBe('top-secret');

    expect(tokenEndpoint.forms.map((form) => Object.fromEntries(form))).toEqual([
      { grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret },
    ]);
  });
});

describe('OAuth token endpoint failing', () => {
  let tokenEndpoint: Awaited<ReturnType<typeof startTokenEndpoint>>;
  beforeAll(async () => {
    tokenEndpoint = await startTokenEndpoint(() => ({ status: 500, body: { error: 'server_error' } }));
  });
  const stack = stackWith(() => oauthEnvironment(tokenEndpoint.url));

  it('a 500 from the token endpoint fails the handshake attempt with "OAuth token endpoint answered HTTP 500" and the subscriber is never called', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Appointment?status=cancelled', endpoint.url, { header: ['secret: top-secret', 'Authorization: Basic xyz'] });

    const [first] = await waitFor(async () => {
      const attempts = await attemptsOf(t, id);
      return attempts.length > 0 ? attempts : undefined;
    });
    expect(first).toMatchObject({ kind: 'handshake', attempt: 1, outcome: 'retrying', http_status: null });
    expect(first!.error).toMatch(/^OAuth token endpoint answered HTTP 500/);
    expect(first!.error).toContain('HTTP 500');

    // A token failure is retryable; once the retries are used up the handshake has failed.
    await untilStatus(t, id, 'error', 15_000);
    const attempts = await attemptsOf(t, id);
    expect(attempts.map(({ attempt, outcome }) => [attempt, outcome])).toEqual([
      [1, 'retrying'],
      [2, 'retrying'],
      [3, 'failed'],
    ]);
    for (const attempt of attempts) {
      expect(attempt.error).toMatch(/^OAuth token endpoint answered HTTP 500/);
      expect(attempt.error).not.toContain(clientSecret);
    }
    expect((await statusOf(t, id)).error).toMatch(/^Handshake failed: OAuth token endpoint answered HTTP 500/);
    expect((await statusOf(t, id)).error).not.toContain(' from http');
    // A failure is not cached: every attempt asked again.
    expect(tokenEndpoint.forms).toHaveLength(3);
    expect(endpoint.calls).toHaveLength(0);
  });
});
