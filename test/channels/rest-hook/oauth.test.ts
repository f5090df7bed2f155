import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTokenProvider, TokenEndpointError, type OAuthConfig } from '../../../src/channels/rest-hook/oauth.ts';

const CLIENT_ID = 'webhook-dispatcher';
const CLIENT_SECRET = 'client-secret-that-must-not-leak';

type Reply = { status: number; body: string; contentType?: string };

/** What the endpoint answers a well-formed request with; replaced per test. */
let answer: () => Reply;
const received: { headers: IncomingHttpHeaders; form: URLSearchParams }[] = [];
let issued = 0;
let endpoint: Server;
let tokenUrl: string;

function json(status: number, body: unknown): Reply {
  return { status, body: JSON.stringify(body) };
}

function issueToken(lifetime: { expires_in?: number } = { expires_in: 3600 }): () => Reply {
  return () => json(200, { access_token: `token-${++issued}`, token_type: 'Bearer', ...lifetime });
}

/** The checks a real authorization server makes before it looks at anything else. */
function check(form: URLSearchParams): Reply | undefined {
  if (form.get('grant_type') !== 'client_credentials') return json(400, { error: 'unsupported_grant_type' });
  if (form.get('client_id') !== CLIENT_ID || form.get('client_secret') !== CLIENT_SECRET) {
    return json(401, { error: 'invalid_client', error_description: 'Client authentication failed' });
  }
  if (form.has('scope') && form.get('scope') !== 'fhir/webhooks.write') return json(400, { error: 'invalid_scope' });
  if (form.has('audience') && form.get('audience') !== 'https://receiver.example') return json(400, { error: 'invalid_target' });
  return undefined;
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

async function close(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())));
}

beforeAll(async () => {
  endpoint = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const form = new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
      received.push({ headers: req.headers, form });
      const { status, body, contentType = 'application/json' } = check(form) ?? answer();
      res.writeHead(status, { 'content-type': contentType }).end(body);
    });
  });
  tokenUrl = `http://127.0.0.1:${await listen(endpoint)}/oauth2/token`;
});
afterAll(() => close(endpoint));

beforeEach(() => {
  received.length = 0;
  answer = issueToken();
});

function config(overrides: Partial<OAuthConfig> = {}): OAuthConfig {
  return { tokenUrl, clientId: CLIENT_ID, clientSecret: CLIENT_SECRET, scope: undefined, audience: undefined, ...overrides };
}

async function failure(promise: Promise<unknown>): Promise<TokenEndpointError> {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error).toBeInstanceOf(TokenEndpointError);
  return error as TokenEndpointError;
}

describe('client-credentials token provider', () => {
  it('posts the client-credentials grant as a form', async () => {
    const token = await createTokenProvider(config()).token();
    expect(token).toBe(`token-${issued}`);
    expect(received).toHaveLength(1);
    const [{ headers, form }] = received as [(typeof received)[number]];
    expect(headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(headers.accept).toBe('application/json');
    expect(Object.fromEntries(form)).toEqual({ grant_type: 'client_credentials', client_id: CLIENT_ID, client_secret: CLIENT_SECRET });
  });

  it('sends scope and audience when configured', async () => {
    await createTokenProvider(config({ scope: 'fhir/webhooks.write', audience: 'https://receiver.example' })).token();
    expect(Object.fromEntries(received[0]!.form)).toEqual({
      grant_type: 'client_credentials',
      client_id: CLIENT_ID,
      client_secret: CLIENT_SECRET,
      scope: 'fhir/webhooks.write',
      audience: 'https://receiver.example',
    });
  });

  it('caches the token across calls', async () => {
    const provider = createTokenProvider(config());
    const first = await provider.token();
    expect(await provider.token()).toBe(first);
    expect(await provider.token()).toBe(first);
    expect(received).toHaveLength(1);
  });

  it('caches a token that comes without expires_in', async () => {
    answer = issueToken({});
    const provider = createTokenProvider(config());
    const first = await provider.token();
    expect(await provider.token()).toBe(first);
    expect(received).toHaveLength(1);
  });

  it('lets concurrent callers share one request', async () => {
    const provider = createTokenProvider(config());
    const tokens = await Promise.all(Array.from({ length: 5 }, () => provider.token()));
    expect(new Set(tokens).size).toBe(1);
    expect(received).toHaveLength(1);
  });

  it('fetches a new token once the old one is about to expire', async () => {
    // expires_in 1 is renewed 10 % early, at 900 ms: by 950 ms it is stale.
    answer = issueToken({ expires_in: 1 });
    const provider = createTokenProvider(config());
    const first = await provider.token();
    expect(await provider.token()).toBe(first);
    expect(received).toHaveLength(1);
    await sleep(950);
    const second = await provider.token();
    expect(second).not.toBe(first);
    expect(received).toHaveLength(2);
  });

  it('reports a rejected client with the status and OAuth error, never the secret', async () => {
    const error = await failure(createTokenProvider(config({ clientSecret: `${CLIENT_SECRET}-wrong` })).token());
    expect(error.message).toContain('401');
    expect(error.message).toContain('invalid_client');
    expect(error.message).toContain('Client authentication failed');
    expect(error.message).not.toContain(CLIENT_SECRET);
  });

  it('keeps the secret out of the message when the server echoes it', async () => {
    answer = () => json(400, { error: 'invalid_request', error_description: `unexpected client_secret ${CLIENT_SECRET}` });
    const error = await failure(createTokenProvider(config()).token());
    expect(error.message).toContain('invalid_request');
    expect(error.message).not.toContain(CLIENT_SECRET);
  });

  it('reports an error page that is not JSON', async () => {
    answer = () => ({ status: 500, body: '<html>Internal Server Error</html>', contentType: 'text/html' });
    const error = await failure(createTokenProvider(config()).token());
    expect(error.message).toContain('500');
  });

  it('reports a success that is not JSON', async () => {
    answer = () => ({ status: 200, body: 'access_token=abc', contentType: 'text/plain' });
    const error = await failure(createTokenProvider(config()).token());
    expect(error.message).toMatch(/not a JSON object/);
    expect(error.message).not.toContain('abc');
  });

  it('reports an answer without access_token', async () => {
    answer = () => json(200, { token_type: 'Bearer', expires_in: 3600, id_token: 'id-token-value' });
    const error = await failure(createTokenProvider(config()).token());
    expect(error.message).toContain('access_token');
    expect(error.message).not.toContain('id-token-value');
  });

  it('does not cache a failure', async () => {
    answer = () => json(503, { error: 'temporarily_unavailable' });
    const provider = createTokenProvider(config());
    expect((await failure(provider.token())).message).toContain('temporarily_unavailable');
    answer = issueToken();
    expect(await provider.token()).toBe(`token-${issued}`);
    expect(received).toHaveLength(2);
  });

  it('reports an unreachable endpoint', async () => {
    const closed = createServer();
    const port = await listen(closed);
    await close(closed);
    const error = await failure(createTokenProvider(config({ tokenUrl: `http://127.0.0.1:${port}/token` })).token());
    expect(error.message).toContain('ECONNREFUSED');
  });

  it('gives up on an endpoint that does not answer in time', async () => {
    const silent = createServer(() => {});
    try {
      const url = `http://127.0.0.1:${await listen(silent)}/token`;
      const error = await failure(createTokenProvider(config({ tokenUrl: url }), { timeoutMs: 200 }).token());
      expect(error.message).toContain('no answer within 200 ms');
    } finally {
      await close(silent);
    }
  });
});
