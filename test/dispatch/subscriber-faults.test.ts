import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import pino from 'pino';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { childEnvironment, cliEntry, runCommand } from '../support/commands.ts';
import { listenOnLoopback, startReceiver, waitFor, type Receiver } from '../support/receiver.ts';
import { attemptsOf, statusOf, subscribe, untilStatus } from '../support/subscriptions.ts';
import { startSmtpServerOnLoopback, type SmtpServer } from '../support/smtp.ts';

/**
 * The dispatcher's edges, end to end: real PostgreSQL, graphile-worker, HTTP
 * receivers, an OAuth token endpoint and an SMTP server, all on 127.0.0.1.
 * Each describe has its own database and workers with the configuration it
 * needs, so that no job scheduled by one can be run under another's settings.
 */

type Stack = { t: TestApp; workers: Workers };

/** Servers to close once the whole file is done (after every describe stopped its workers), newest first. */
const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * A test database and workers configured by `environment` (BASE_URL is always
 * the test one), read when the describe starts: after its earlier beforeAll
 * hooks, so it can name the ports of servers they started.
 */
function stackWith(environment: () => Record<string, string>): { current: () => Stack } {
  let stack: Stack | undefined;
  beforeAll(async () => {
    const t = await startTestApp();
    const workers = await startWorkers(loadConfig({ BASE_URL: baseUrl, ...environment() }), t.database, testSecretsKey, pino({ level: 'silent' }));
    stack = { t, workers };
  });
  afterAll(async () => {
    await stack?.workers.stop();
    await stack?.t.close();
  });
  return { current: () => stack! };
}

async function receiver(): Promise<Receiver> {
  const started = await startReceiver();
  cleanups.push(() => started.close());
  return started;
}

/** A node:http server on 127.0.0.1 (closed, with its connections, after the file). */
async function listen(server: Server): Promise<number> {
  const { port, close } = await listenOnLoopback(server);
  cleanups.push(close);
  return port;
}

/** Whether `localhost` is resolved from /etc/hosts before any DNS server is asked. */
function localhostFromHostsFile(): boolean {
  const read = (file: string) => {
    try {
      return readFileSync(file, 'utf8');
    } catch {
      return undefined;
    }
  };
  const hosts = read('/etc/hosts') ?? '';
  const mapped = hosts.split('\n').some((line) => /^\s*(127\.\d+\.\d+\.\d+|::1)\s+(.*\s)?localhost(\s|$)/.test(line.replace(/#.*/, '') + ' '));
  const order = /^hosts:\s*(.*)$/m.exec(read('/etc/nsswitch.conf') ?? 'hosts: files dns')?.[1]?.split(/\s+/) ?? [];
  return mapped && order[0] === 'files';
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));


describe('SSRF guard on (WEBHOOK_ALLOW_PRIVATE_NETWORKS unset)', () => {
  const stack = stackWith(() => ({ DELIVERY_RETRY_DELAYS_MS: '50,50' }));

  it('never reaches a loopback receiver: the handshake is recorded as failed and the subscription is in error with the reason', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Practitioner?active=true', endpoint.url);
    await untilStatus(t, id, 'error');

    const { error } = await statusOf(t, id);
    expect(error).toMatch(/^Handshake failed: /);
    expect(error).toContain("refused: the endpoint's address is not public (loopback)");
    expect(error).toContain(endpoint.url);
    // A refused address is permanent: one attempt, no retry.
    expect(await attemptsOf(t, id)).toEqual([
      { kind: 'handshake', attempt: 1, outcome: 'failed', http_status: null, error: expect.stringContaining("the endpoint's address is not public (loopback)"), resource_id: null, duration_ms: expect.any(Number) },
    ]);
    await sleep(300);
    expect(endpoint.calls).toHaveLength(0);
  });

  // Only where the hosts file answers for localhost: a lookup must never reach a DNS server off loopback.
  it.skipIf(!localhostFromHostsFile())('refuses a host name that resolves to loopback too (the lookup path, not only IP literals)', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const byName = endpoint.url.replace('127.0.0.1', 'localhost');
    const { id } = await subscribe(t, 'Practitioner?active=false', byName);
    await untilStatus(t, id, 'error');
    // The subscriber learns that the address is not public, not which address the name resolved to (the operator's log says).
    const { error } = await statusOf(t, id);
    expect(error).toContain("the endpoint's address is not public (loopback)");
    expect(error).not.toMatch(/127\.0\.0\.1|::1/);
    expect(await attemptsOf(t, id)).toMatchObject([{ kind: 'handshake', attempt: 1, outcome: 'failed', http_status: null }]);
    expect(endpoint.calls).toHaveLength(0);
  });
});

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

    const created = (await t.fhir('POST', '/Appointment', {
          resourceType: 'Appointment',
          status: 'booked',
          start: '2026-03-02T09:00:00Z',
          end: '2026-03-02T09:30:00Z',
          participant: [{ actor: { reference: 'Practitioner/oauth-doc' }, status: 'accepted' }],
        })).json();
    const [, notification] = await endpoint.waitForCalls(2);
    expect(notification!.json).toEqual(created);
    expect(notification!.headers.authorization).toBe('Bearer token-1');
    expect(notification!.headers.secret).toBe('top-secret');

    expect(tokenEndpoint.forms.map((form) => Object.fromEntries(form))).toEqual([{ grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret }]);
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
    await waitFor(async () => ((await attemptsOf(t, id)).some((row) => row.outcome === 'delivered' && row.kind === 'notification') ? true : undefined), 5_000, 'the delivery recorded');
    expect(await statusOf(t, id)).toMatchObject({ status: 'active', failure_count: 0 });
    expect((await attemptsOf(t, id)).filter((row) => row.kind === 'notification')).toMatchObject([
      { attempt: 1, outcome: 'retrying', http_status: 429, error: 'HTTP 429', resource_id: created.id },
      { attempt: 2, outcome: 'delivered', http_status: 200, error: null, resource_id: created.id },
    ]);
  });
});

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

describe('graceful shutdown', () => {
  it('cuts a call that outlasts graphile-worker\'s 5 s of patience short, records nothing, and enqueues the event again', { timeout: 60_000 }, async () => {
    const t = await startTestApp();
    cleanups.push(() => t.close());
    const config = loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
    // Answers the handshake, then holds every notification without answering.
    const held: ServerResponse[] = [];
    const server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        if ((JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceType: string }).resourceType === 'Bundle') response.writeHead(200).end();
        else held.push(response);
      });
    });
    const endpointUrl = `http://127.0.0.1:${await listen(server)}/hook`;
    const workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
    const { id } = await subscribe(t, 'Encounter?status=cancelled', endpointUrl);
    await untilStatus(t, id, 'active');
    await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'cancelled', class: { code: 'AMB' } });
    await waitFor(() => (held.length === 1 ? true : undefined), 10_000, 'the notification to be held');

    const stopping = performance.now();
    await workers.stop();
    const stoppedAfterMs = performance.now() - stopping;
    // graphile-worker's abort timeout (5 s) and some slack; without the abort the call would run to its 15 s timeout.
    expect(stoppedAfterMs).toBeLessThan(12_000);
    expect((await attemptsOf(t, id)).filter((row) => row.kind === 'notification')).toEqual([]);
    // The event cut short is not recorded: it stays pending, numbered, for this worker after its restart or another.
    const { rows } = await t.database.pool.query(
      `SELECT event.resource_type, event.version_id, event.event_number, event.attempts, event.not_before, event.status, stream.claimed_by
       FROM webhook.subscription_events event JOIN webhook.subscription_streams stream USING (subscription_id)
       WHERE event.subscription_id = $1`,
      [id],
    );
    expect(rows).toEqual([{ resource_type: 'Encounter', version_id: 1, event_number: '1', attempts: 0, not_before: null, status: 'pending', claimed_by: null }]);
    expect(await statusOf(t, id)).toMatchObject({ status: 'active', failure_count: 0 });
    for (const response of held) response.destroy();
  });
});

/** A real SMTP server on loopback (test/support/smtp.ts), closed after the file. */
async function startSmtpServer(): Promise<SmtpServer> {
  const server = await startSmtpServerOnLoopback();
  cleanups.push(() => server.close());
  return server;
}

/** The body of a message decoded from its transfer encoding, with \n for the wire's CRLF. */
function bodyOf(raw: string): { headers: string; body: string } {
  const end = raw.indexOf('\r\n\r\n');
  const headers = raw.slice(0, end).replace(/\r\n(?=[ \t])/g, '');
  const encoding = /^content-transfer-encoding:\s*(\S+)/im.exec(headers)?.[1]?.toLowerCase();
  const encoded = raw.slice(end + 4);
  let body = encoded;
  if (encoding === 'base64') body = Buffer.from(encoded, 'base64').toString('utf8');
  if (encoding === 'quoted-printable') {
    const bytes = encoded.replace(/=\r\n/g, '').replace(/=([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
    body = Buffer.from(bytes, 'latin1').toString('utf8');
  }
  return { headers, body: body.replace(/\r\n/g, '\n') };
}

describe('deactivation alert by e-mail', () => {
  let smtp: Awaited<ReturnType<typeof startSmtpServer>>;
  beforeAll(async () => {
    smtp = await startSmtpServer();
  });
  const stack = stackWith(() => ({
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    DELIVERY_RETRY_DELAYS_MS: '50,50',
    DELIVERY_MAX_FAILURES: '3',
    SMTP_URL: smtp.url,
    ALERT_EMAIL_FROM: 'webhooks@fhir.test',
  }));

  it('after the third failure, mails the contact the criteria, endpoint, HTTP status and the undelivered resource link, and no header value', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const criteria = 'Encounter?status=finished';
    const { id } = await subscribe(t, criteria, endpoint.url, {
      header: ['secret: do-not-mail-this-secret', 'X-Api-Token: do-not-mail-this-token'],
      contact: 'oncall@example.org',
    });
    await untilStatus(t, id, 'active');
    endpoint.answer = () => ({ status: 503 });

    const created = (await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'finished', class: { code: 'AMB' } })).json();
    await untilStatus(t, id, 'error', 15_000);
    const alert = await waitFor(async () => {
      const { rows } = await t.database.pool.query(`SELECT recipients, handled_as FROM webhook.deactivation_alerts WHERE subscription_id = $1`, [id]);
      return rows[0]?.handled_as ? rows : undefined;
    });
    expect(alert).toEqual([{ recipients: ['oncall@example.org'], handled_as: 'sent' }]);
    // Handshake plus the three failed attempts.
    expect(endpoint.calls).toHaveLength(4);

    await sleep(300);
    expect(smtp.received).toHaveLength(1);
    const [mail] = smtp.received;
    expect(mail!.rcptTo).toEqual(['oncall@example.org']);
    const { headers, body } = bodyOf(mail!.raw);
    expect(headers).toContain(`Subject: Webhook deactivated: ${criteria}`);
    expect(body).toContain(`Criteria:             ${criteria}\n`);
    expect(body).toContain(`Endpoint:             ${endpoint.url}\n`);
    expect(body).toContain('HTTP status:          503\n');
    expect(body).toContain(`Undelivered resource: ${baseUrl}/fhir/resources/Encounter/${created.id}\n`);
    expect(body).toContain(`Subscription:         ${id}\n`);
    for (const text of [mail!.raw, body]) {
      expect(text).not.toContain('do-not-mail-this-secret');
      expect(text).not.toContain('do-not-mail-this-token');
    }
  });
});

describe('deactivation alerts of a flapping subscriber', () => {
  let smtp: Awaited<ReturnType<typeof startSmtpServer>>;
  beforeAll(async () => {
    smtp = await startSmtpServer();
  });
  const intervalSeconds = 3;
  const stack = stackWith(() => ({
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    DELIVERY_RETRY_DELAYS_MS: '50',
    DELIVERY_MAX_FAILURES: '1',
    SMTP_URL: smtp.url,
    ALERT_EMAIL_INTERVAL_SECONDS: String(intervalSeconds),
  }));

  it('records every deactivation and mails the first at once, then at most one e-mail per interval telling how many came since', { timeout: 60_000 }, async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    // Its handshakes pass and its notifications fail: each event reactivates it, then deactivates it.
    endpoint.answer = (call) => ({ status: call.json.resourceType === 'Bundle' ? 200 : 500 });
    const criteria = 'Encounter?status=in-progress';
    const { id } = await subscribe(t, criteria, endpoint.url, { contact: 'flapping@example.org' });
    await untilStatus(t, id, 'active');
    const writingUntil = Date.now() + 7_000;
    while (Date.now() < writingUntil) {
      await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'in-progress', class: { code: 'AMB' } });
      await sleep(150);
    }
    type Row = { id: string; handled_as: string | null; handled_at: Date | null; deactivations_told: number | null; told_in: string | null };
    const alerts = () => t.database.pool.query<Row>('SELECT id::text, handled_as, handled_at, deactivations_told, told_in::text FROM webhook.deactivation_alerts WHERE subscription_id = $1 ORDER BY id', [id]);
    // Every deactivation told, the last ones at the end of their interval.
    const rows = await waitFor(async () => {
      const { rows } = await alerts();
      return rows.every((row) => row.handled_as !== null) ? rows : undefined;
    }, 15_000, 'every deactivation told');
    const mailed = rows.filter((row) => row.handled_as === 'sent');
    expect(rows.length, 'deactivations').toBeGreaterThanOrEqual(3);
    expect(mailed.length, 'e-mails').toBeLessThan(rows.length);
    // Each deactivation told exactly once: in its own e-mail, or folded into a later one's.
    expect(mailed.reduce((sum, row) => sum + row.deactivations_told!, 0)).toBe(rows.length);
    for (const row of rows.filter((row) => row.handled_as === 'folded')) expect(mailed.map((told) => told.id)).toContain(row.told_in);
    // The first at once, then never two within the interval.
    expect(mailed[0]!.id).toBe(rows[0]!.id);
    expect(mailed[0]!.deactivations_told).toBe(1);
    for (const [earlier, later] of mailed.slice(1).map((row, index) => [mailed[index]!, row] as const)) {
      expect(later.handled_at!.getTime() - earlier.handled_at!.getTime()).toBeGreaterThanOrEqual(intervalSeconds * 1000 - 50);
    }

    await sleep(300);
    const mails = smtp.received.filter((mail) => mail.rcptTo.includes('flapping@example.org')).map((mail) => bodyOf(mail.raw));
    expect(mails).toHaveLength(mailed.length);
    expect(mails[0]!.headers).toContain(`Subject: Webhook deactivated: ${criteria}`);
    const digest = mailed.findIndex((row) => row.deactivations_told! > 1);
    expect(digest, 'an e-mail telling of several deactivations').toBeGreaterThan(0);
    const told = mailed[digest]!.deactivations_told!;
    expect(mails[digest]!.headers).toContain(`Subject: Webhook deactivated ${told} times: ${criteria}`);
    expect(mails[digest]!.body).toContain(`Deactivations:        ${told} since ${mailed[digest - 1]!.handled_at!.toISOString()}\n`);

    // The flapping shows where an operator looks: subscriptions list and show, and the metrics.
    const cli = (...args: string[]) => runCommand(process.execPath, [cliEntry, 'subscriptions', ...args], childEnvironment({ DATABASE_URL: t.database.url, LOG_LEVEL: 'warn' }));
    const listed = (await cli('list')).output.split('\n').find((line) => line.startsWith(id));
    expect(listed).toMatch(new RegExp(`^${id}\\s+\\w+\\s+\\d+\\s+${rows.length}\\s`));
    expect((await cli('show', id)).output).toMatch(new RegExp(`\\n {2}in error {2}${rows.length} times in the last 24 hours, \\d+ in a row without a delivery \\(flapping: `));
    const exposed = await createMetrics(t.database.db).registry.metrics();
    expect(exposed).toContain('fhir_webhooks_flapping_subscriptions 1\n');
    expect(exposed).toContain(`fhir_webhooks_subscription_deactivations_last_day_max ${rows.length}\n`);
    expect(exposed).not.toContain(id);
  });
});

describe('delivery log', () => {
  const stack = stackWith(() => ({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_LOG_RETENTION_DAYS: '30' }));

  it('the cleanup job deletes the attempts, settled events and told deactivations older than the retention and the previous signing secrets past their overlap, and keeps the others', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Patient?active=true', endpoint.url);
    await untilStatus(t, id, 'active');
    const insert = (daysAgo: number, resourceId: string) =>
      t.database.pool.query(
        `INSERT INTO webhook.delivery_attempts (subscription_id, kind, resource_type, resource_id, version_id, attempt, started_at, duration_ms, http_status, outcome)
         VALUES ($1, 'notification', 'Patient', $2, 1, 1, now() - make_interval(days => $3), 12, 200, 'delivered')`,
        [id, resourceId, daysAgo],
      );
    await insert(40, 'old');
    await insert(29, 'recent');
    // Settled events go with the attempts; a pending one stays, however old (this one's subscription is gone, so no sender takes it).
    const event = (subscriptionId: string, writtenDaysAgo: number, settledDaysAgo: number | null, resourceId: string) =>
      t.database.pool.query(
        `INSERT INTO webhook.subscription_events (subscription_id, resource_type, resource_id, version_id, deleted, written_at, status, settled_at)
         VALUES ($1, 'Patient', $2, 1, false, now() - make_interval(days => $3), CASE WHEN $4::int IS NULL THEN 'pending' ELSE 'delivered' END, now() - make_interval(days => $4::int))`,
        [subscriptionId, resourceId, writtenDaysAgo, settledDaysAgo],
      );
    await event(id, 41, 40, 'old');
    await event(id, 29, 29, 'recent');
    await event(randomUUID(), 50, null, 'waiting');
    // A previous signing secret whose rotation overlap has ended is dropped; one still in its overlap stays.
    const { id: overlapping } = await subscribe(t, 'Patient?active=false', endpoint.url);
    const previousSecret = (subscriptionId: string, untilSecondsFromNow: number) =>
      t.database.pool.query(`UPDATE webhook.subscriptions SET previous_signing_secret_encrypted = '\\x00', previous_secret_until = now() + make_interval(secs => $2) WHERE id = $1`, [
        subscriptionId,
        untilSecondsFromNow,
      ]);
    await previousSecret(id, -60);
    await previousSecret(overlapping, 3600);
    // Deactivations told (sent, logged, or folded into a later e-mail) go with the attempts; an untold one stays, however old: its e-mail is still due.
    const deactivation = async (daysAgo: number, handledAs: 'sent' | 'logged' | 'folded' | null, toldIn?: string) =>
      (
        await t.database.pool.query<{ id: string }>(
          `INSERT INTO webhook.deactivation_alerts (subscription_id, recipients, reason, created_at, handled_as, handled_at, deactivations_told, told_in)
           VALUES ($1, '{}', $2, now() - make_interval(days => $3),
                   $4::text, CASE WHEN $4::text IS NOT NULL THEN now() - make_interval(days => $3) END, CASE WHEN $4::text IN ('sent', 'logged') THEN 1 END, $5)
           RETURNING id`,
          [id, `${handledAs ?? 'untold'} ${daysAgo} days ago`, daysAgo, handledAs, toldIn ?? null],
        )
      ).rows[0]!.id;
    const oldMail = await deactivation(41, 'sent');
    await deactivation(42, 'folded', oldMail);
    await deactivation(40, 'logged');
    await deactivation(40, null);
    const recentMail = await deactivation(29, 'sent');
    await deactivation(29, 'folded', recentMail);

    const { rows: jobs } = await t.database.pool.query<{ id: string }>(`SELECT id FROM graphile_worker.add_job('delivery_log_cleanup')`);
    // A job that succeeded is deleted; one that failed stays, with its error.
    await waitFor(async () => {
      const { rowCount } = await t.database.pool.query('SELECT 1 FROM graphile_worker.jobs WHERE id = $1', [jobs[0]!.id]);
      return rowCount === 0 ? true : undefined;
    });
    const remaining = await attemptsOf(t, id);
    expect(remaining.map((row) => [row.kind, row.resource_id])).toEqual([
      ['handshake', null],
      ['notification', 'recent'],
    ]);
    const { rows: events } = await t.database.pool.query(`SELECT resource_id FROM webhook.subscription_events ORDER BY resource_id`);
    expect(events.map((row) => row.resource_id)).toEqual(['recent', 'waiting']);
    const { rows: secrets } = await t.database.pool.query(`SELECT id, previous_signing_secret_encrypted IS NOT NULL AS kept FROM webhook.subscriptions WHERE id = ANY($1)`, [[id, overlapping]]);
    expect(Object.fromEntries(secrets.map((row) => [row.id, row.kept]))).toEqual({ [id]: false, [overlapping]: true });
    const { rows: deactivations } = await t.database.pool.query(`SELECT reason FROM webhook.deactivation_alerts WHERE subscription_id = $1 ORDER BY reason`, [id]);
    expect(deactivations.map((row) => row.reason)).toEqual(['folded 29 days ago', 'sent 29 days ago', 'untold 40 days ago']);
  });

  it('the webhook.delivery_log view shows each attempt with its subscription criteria and endpoint', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Patient?gender=female', endpoint.url);
    await untilStatus(t, id, 'active');
    const created = (await t.fhir('POST', '/Patient', { resourceType: 'Patient', gender: 'female' })).json();
    await endpoint.waitForCalls(2);
    const rows = await waitFor(async () => {
      const { rows } = await t.database.pool.query(
        `SELECT kind, outcome, http_status, attempt, resource_type, resource_id, version_id, subscription_id, criteria, endpoint, subscription_status, failure_count
         FROM webhook.delivery_log WHERE subscription_id = $1 ORDER BY started_at`,
        [id],
      );
      return rows.length === 2 ? rows : undefined;
    });
    const common = { subscription_id: id, criteria: 'Patient?gender=female', endpoint: endpoint.url, subscription_status: 'active', failure_count: 0, http_status: 200, outcome: 'delivered', attempt: 1 };
    expect(rows).toEqual([
      { ...common, kind: 'handshake', resource_type: null, resource_id: null, version_id: null },
      { ...common, kind: 'notification', resource_type: 'Patient', resource_id: created.id, version_id: 1 },
    ]);
  });
});

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

describe('subscriber faults', () => {
  const stack = stackWith(() => ({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_RETRY_DELAYS_MS: '50,50', DELIVERY_RESPONSE_TIMEOUT_MS: '500' }));

  /**
   * A subscriber whose first notification meets `fault` (the handshake and any
   * later call are answered 200), the event's attempts once settled, and the
   * calls it received.
   */
  async function faultyDelivery(criteria: string, resource: Record<string, unknown>, fault: (response: ServerResponse) => void, settled: (outcomes: string[]) => boolean) {
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
    const attempts = await waitFor(async () => {
      const notifications = (await attemptsOf(t, id)).filter((row) => row.kind === 'notification');
      return notifications.length > 0 && settled(notifications.map((row) => row.outcome)) ? notifications : undefined;
    }, 10_000, 'the attempts');
    return { attempts, state: await statusOf(t, id), calls: () => calls };
  }

  it('an answer later than the response budget is a retryable failure, and the retry is delivered', async () => {
    const { attempts, state } = await faultyDelivery('Device?status=active', { resourceType: 'Device', status: 'active' }, (response) => setTimeout(() => response.writeHead(200).end('late'), 1_500), (outcomes) => outcomes.includes('delivered'));
    expect(attempts).toMatchObject([{ outcome: 'retrying', http_status: null, error: expect.stringContaining('response timeout') }, { outcome: 'delivered' }]);
    expect(state).toMatchObject({ status: 'active', failure_count: 0 });
  });

  it('a connection reset is a retryable failure, and the retry is delivered', async () => {
    const { attempts } = await faultyDelivery('Device?status=inactive', { resourceType: 'Device', status: 'inactive' }, (response) => response.socket?.destroy(), (outcomes) => outcomes.includes('delivered'));
    expect(attempts).toMatchObject([{ outcome: 'retrying', http_status: null, error: expect.stringMatching(/ECONNRESET|socket|closed/i) }, { outcome: 'delivered' }]);
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
    const { rows } = await stack.current().t.database.pool.query<{ excerpt: string }>(
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

describe('order per resource under concurrent updates and retries', () => {
  const stack = stackWith(() => ({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_RETRY_DELAYS_MS: '30,30,30', DELIVERY_MAX_FAILURES: '6' }));

  it('no subscriber receives a version of a resource after a newer one, and each resource\'s last version arrives', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Task?status=requested', endpoint.url);
    await untilStatus(t, id, 'active');
    // One call in four fails (retryable), so retries come after later versions.
    let calls = 0;
    endpoint.answer = () => ({ status: ++calls % 4 === 0 ? 503 : 200 });

    const resources = ['t1', 't2', 't3', 't4', 't5'];
    for (const resource of resources) await t.fhir('PUT', `/Task/${resource}`, { resourceType: 'Task', id: resource, status: 'requested', intent: 'order' });
    // Five writers update each resource ten times, concurrently.
    await Promise.all(
      Array.from({ length: 5 }, async (_, writer) => {
        for (let round = 0; round < 10; round++) {
          for (const resource of resources) {
            await t.fhir('PUT', `/Task/${resource}`, { resourceType: 'Task', id: resource, status: 'requested', intent: 'order', description: `writer ${writer} round ${round}` });
          }
        }
      }),
    );
    const { rows } = await t.database.pool.query<{ id: string; version: string }>(
      `SELECT id, content -> 'meta' ->> 'versionId' AS version FROM fhir.resources WHERE resource_type = 'Task'`,
    );
    const last = new Map(rows.map((row) => [row.id, Number(row.version)]));
    const received = () => endpoint.calls.flatMap((call) => (call.json.resourceType === 'Task' ? [{ id: call.json.id as string, version: Number((call.json.meta as { versionId: string }).versionId) }] : []));
    await waitFor(() => (resources.every((resource) => received().some((call) => call.id === resource && call.version === last.get(resource))) ? true : undefined), 30_000, 'every last version');

    for (const resource of resources) {
      const versions = received().filter((call) => call.id === resource).map((call) => call.version);
      for (let index = 1; index < versions.length; index++) {
        expect(versions[index], `${resource}: ${versions.join(', ')}`).toBeGreaterThanOrEqual(versions[index - 1]!);
      }
    }
    expect(calls).toBeGreaterThan(20);
  });
});
