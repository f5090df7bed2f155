import { createServer } from 'node:http';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/database.ts';
import { testSecretsKey } from '../support/app.ts';
import { childEnvironment, cliEntry, startCommand, stopStartedCommands } from '../support/commands.ts';
import { freePort, listenOnLoopback, startReceiver, waitFor } from '../support/receiver.ts';
import { startSmtpServerOnLoopback } from '../support/smtp.ts';

/**
 * A subscription's whole life through a real `serve` process logging at
 * trace level, with every kind of secret the service handles: then no secret
 * is in its output, its records or the e-mails it sent.
 */

const secrets = {
  apiKey: 'bootstrap-api-key-that-must-not-leak',
  wrongApiKey: 'guessed-api-key-that-must-not-leak',
  signingSecret: 'signing-secret-that-must-not-leak',
  clientAuthorization: 'client-bearer-that-must-not-leak',
  endpointPassword: 'endpoint-password-that-must-not-leak',
  endpointQueryToken: 'endpoint-query-token-that-must-not-leak',
  oauthClientSecret: 'oauth-client-secret-that-must-not-leak',
  oauthAccessToken: 'oauth-access-token-that-must-not-leak',
  refusedHeaderItem: 'header-item-without-colon-that-must-not-leak',
  patientNameInSearch: 'Searchedfamilynamethatmustnotleak',
  encryptionKey: testSecretsKey.toString('base64'),
};

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  await stopStartedCommands();
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** An OAuth 2.0 token endpoint that issues the access token for the right client credentials. */
async function startTokenEndpoint(): Promise<string> {
  const server = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => (body += chunk.toString()));
    request.on('end', () => {
      const form = new URLSearchParams(body);
      const basic = Buffer.from(`webhooks:${secrets.oauthClientSecret}`).toString('base64');
      const authenticated = request.headers.authorization === `Basic ${basic}` || form.get('client_secret') === secrets.oauthClientSecret;
      response.writeHead(authenticated ? 200 : 401, { 'content-type': 'application/json' });
      response.end(
        JSON.stringify(authenticated ? { access_token: secrets.oauthAccessToken, token_type: 'Bearer', expires_in: 3600 } : { error: 'invalid_client' }),
      );
    });
  });
  const { port, close } = await listenOnLoopback(server);
  cleanups.push(close);
  return `http://127.0.0.1:${port}/token`;
}

describe("secrets through a subscription's whole life, logged at trace level", () => {
  it('are in no log line, no record and no e-mail', { timeout: 90_000 }, async () => {
    const database = await createTestDatabase();
    cleanups.push(() => database.drop());
    const smtp = await startSmtpServerOnLoopback();
    cleanups.push(() => smtp.close());
    const receiver = await startReceiver();
    cleanups.push(() => receiver.close());
    const tokenUrl = await startTokenEndpoint();
    const port = await freePort();
    const service = startCommand(
      process.execPath,
      [cliEntry, 'serve'],
      childEnvironment({
        DATABASE_URL: database.url,
        PORT: String(port),
        LOG_LEVEL: 'trace',
        BOOTSTRAP_API_KEY: secrets.apiKey,
        SECRETS_ENCRYPTION_KEY: secrets.encryptionKey,
        WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
        DELIVERY_RETRY_DELAYS_MS: '100',
        DELIVERY_MAX_FAILURES: '2',
        SMTP_URL: smtp.url,
        OAUTH_TOKEN_URL: tokenUrl,
        OAUTH_CLIENT_ID: 'webhooks',
        OAUTH_CLIENT_SECRET: secrets.oauthClientSecret,
      }),
    );
    await service.waitFor(/Listening on/);
    const api = (method: string, path: string, body?: unknown, apiKey = secrets.apiKey) =>
      fetch(`http://127.0.0.1:${port}/fhir/resources${path}`, {
        method,
        headers: { 'x-api-key': apiKey, ...(body === undefined ? {} : { 'content-type': 'application/fhir+json' }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    const subscription = (header: string[]) => ({
      resourceType: 'Subscription',
      status: 'requested',
      criteria: 'Patient?family=Lifecycle',
      reason: 'secrets test',
      contact: [{ system: 'email', value: 'ops@example.org' }],
      channel: {
        type: 'rest-hook',
        endpoint: `${receiver.url.replace('//', `//bob:${secrets.endpointPassword}@`)}?token=${secrets.endpointQueryToken}`,
        payload: 'application/fhir+json',
        header,
      },
    });
    const wrote = async (family: string) => (await api('POST', '/Patient', { resourceType: 'Patient', name: [{ family }] })).json() as Promise<{ id: string }>;
    // A read answers the spec's envelope: { fullUrl, resource, search }.
    const status = async (id: string) => ((await (await api('GET', `/Subscription/${id}`)).json()) as { resource: { status: string } }).resource.status;

    // Refused: a wrong key, and a header item that is not a header (its refusal names only its position).
    expect((await api('GET', '/Patient', undefined, secrets.wrongApiKey)).status).toBe(401);
    expect((await api('POST', '/Subscription', subscription([secrets.refusedHeaderItem]))).status).toBe(400);

    // Created, handshake, active; a search carrying a patient's name.
    const created = await api(
      'POST',
      '/Subscription',
      subscription([`secret: ${secrets.signingSecret}`, `Authorization: Bearer ${secrets.clientAuthorization}`]),
    );
    expect(created.status).toBe(201);
    const { id } = (await created.json()) as { id: string };
    await waitFor(async () => ((await status(id)) === 'active' ? true : undefined), 30_000, 'the activation');
    expect((await api('GET', `/Patient?family=${secrets.patientNameInSearch}`)).status).toBe(200);

    // Failing calls, retried, then the deactivation and its e-mail.
    receiver.answer = () => ({ status: 500 });
    await wrote('Lifecycle');
    await waitFor(async () => ((await status(id)) === 'error' ? true : undefined), 30_000, 'the deactivation');
    await waitFor(() => (smtp.received.length > 0 ? true : undefined), 30_000, 'the alert e-mail');

    // Reactivated by the next event, which is delivered with the OAuth token.
    receiver.answer = () => ({ status: 200 });
    const last = await wrote('Lifecycle');
    await waitFor(() => (receiver.calls.some((call) => call.json.id === last.id) ? true : undefined), 30_000, 'the delivery after the reactivation');
    expect(receiver.calls.at(-1)!.headers.authorization).toBe(`Bearer ${secrets.oauthAccessToken}`);
    await waitFor(async () => ((await status(id)) === 'active' ? true : undefined), 30_000, 'the reactivation');

    // Switched off, in a transaction Bundle.
    const switchedOff = await fetch(`http://127.0.0.1:${port}/fhir/resources/Bundle`, {
      method: 'POST',
      headers: { 'x-api-key': secrets.apiKey, 'content-type': 'application/fhir+json' },
      body: JSON.stringify({
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [{ resource: { ...subscription([]), status: 'off' }, request: { method: 'POST', url: 'Subscription' } }],
      }),
    });
    expect(switchedOff.status).toBe(200);
    expect(await status(id)).toBe('off');

    service.interrupt('SIGINT');
    expect(await service.exited).toBe(0);

    // What the process wrote: trace-level JSON lines, the lifecycle's events among them.
    const lines = service
      .output()
      .split('\n')
      .filter((line) => line.startsWith('{'));
    expect(lines.some((line) => (JSON.parse(line) as { level: number }).level <= 20)).toBe(true);
    // One info line (or warning) per change of the subscription's state, naming it.
    const changes = lines
      .map((line) => JSON.parse(line) as { msg: string; subscriptionId?: string })
      .filter((line) => line.subscriptionId === id && (line.msg.startsWith('subscription') || line.msg.startsWith('notifications')))
      .map((line) => line.msg);
    expect(changes).toEqual([
      'subscription created (requested)',
      'subscription activated',
      'notifications failed; retrying',
      'subscription deactivated after repeated delivery failures',
      'subscription reactivated by a new event',
      'subscription switched off',
    ]);
    // What it recorded: every row of every table it writes, as text.
    const { rows: tables } = await database.pool.query<{ name: string }>(
      `SELECT format('%I.%I', table_schema, table_name) AS name FROM information_schema.tables
       WHERE table_schema IN ('webhook', 'graphile_worker', 'fhir', 'public') AND table_type = 'BASE TABLE'`,
    );
    expect(tables.length).toBeGreaterThan(5);
    let records = '';
    for (const { name } of tables) records += JSON.stringify((await database.pool.query(`SELECT * FROM ${name}`)).rows);
    expect(records).toContain(id);
    const mails = smtp.received.map((mail) => mail.raw).join('\n');
    expect(mails).toContain(id);

    for (const [name, secret] of Object.entries(secrets)) {
      expect(service.output(), `${name} in the output`).not.toContain(secret);
      expect(records, `${name} in the records`).not.toContain(secret);
      expect(mails, `${name} in the e-mails`).not.toContain(secret);
    }
  });
});
