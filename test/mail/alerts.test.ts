import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { createAlertMailer, type DeactivationAlert } from '../../src/mail/alerts.ts';
import { freePort } from '../support/receiver.ts';
import { startSmtpServerOnLoopback, type SmtpServer } from '../support/smtp.ts';

const from = 'webhooks@fhir.test';

const alert: DeactivationAlert = {
  subscriptionId: '3f9c2a4e-8b1d-4c7a-9e52-0d6b1f2a7c31',
  criteria: 'Appointment?status=booked&_include=Appointment:patient',
  endpoint: 'https://receiver.example.org/hooks',
  recipients: ['ops@example.org', 'oncall@example.org'],
  httpStatus: 503,
  errorMessage: 'endpoint answered 503 Service Unavailable',
  undeliveredResourceUrl: 'http://fhir.test/fhir/resources/Appointment/a1/_history/2',
  deactivatedAt: '2025-03-04T05:06:07.123456Z',
  deactivations: 1,
  previousAlertAt: undefined,
};

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A real SMTP server on loopback (closed after the test). */
async function startSmtpServer(refused: string[] = []): Promise<SmtpServer> {
  const server = await startSmtpServerOnLoopback(refused);
  cleanups.push(() => server.close());
  return server;
}

/** A loopback port nothing listens on: bound, then released. */
function capturingLogger() {
  const lines: string[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
  return { logger, logged: () => lines.map((line) => JSON.parse(line)) };
}

function mailer(smtpUrl: string | undefined, logger = pino({ level: 'silent' })) {
  const created = createAlertMailer({ smtpUrl, from }, logger);
  cleanups.push(() => created.close());
  return created;
}

/** Headers (unfolded, names lower-cased) and the body decoded from its transfer encoding, with \n for the wire's CRLF. */
function parseMessage(raw: string): { headers: Map<string, string>; body: string } {
  const end = raw.indexOf('\r\n\r\n');
  const lines = raw
    .slice(0, end)
    .replace(/\r\n(?=[ \t])/g, '')
    .split('\r\n');
  const headers = new Map(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
  return { headers, body: decodeBody(raw.slice(end + 4), headers.get('content-transfer-encoding')).replace(/\r\n/g, '\n') };
}

function decodeBody(encoded: string, encoding: string | undefined): string {
  if (encoding === 'base64') return Buffer.from(encoded, 'base64').toString('utf8');
  if (encoding !== 'quoted-printable') return encoded;
  const bytes = encoded.replace(/=\r\n/g, '').replace(/=([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
  return Buffer.from(bytes, 'latin1').toString('utf8');
}

describe('deactivation alert by e-mail', () => {
  it('tells of several deactivations in one e-mail: their count since the previous alert in the subject and the text, the facts of the latest', async () => {
    const smtp = await startSmtpServer();
    expect(await mailer(smtp.url).send({ ...alert, deactivations: 7, previousAlertAt: '2025-03-04T04:06:07.000Z' })).toBe('sent');
    const { headers, body } = parseMessage(smtp.received[0]!.raw);
    expect(headers.get('subject')).toBe(`Webhook deactivated 7 times: ${alert.criteria}`);
    expect(body).toMatch(
      /^Deliveries to the endpoint of this webhook subscription keep failing: it was deactivated \(status error\) 7 times since the previous alert \(2025-03-04T04:06:07\.000Z\)/,
    );
    expect(body).toContain('Deactivations:        7 since 2025-03-04T04:06:07.000Z\n');
    expect(body).toContain(`Deactivated at:       ${alert.deactivatedAt}\n`);
  });

  it('sends one message to every contact, from the configured sender, with every fact and how to reactivate', async () => {
    const smtp = await startSmtpServer();
    expect(await mailer(smtp.url).send(alert)).toBe('sent');

    expect(smtp.received).toHaveLength(1);
    const [message] = smtp.received;
    expect(message!.mailFrom).toBe(from);
    expect(message!.rcptTo).toEqual(alert.recipients);
    const { headers, body } = parseMessage(message!.raw);
    expect(headers.get('from')).toBe(from);
    expect(headers.get('to')).toBe('ops@example.org, oncall@example.org');
    expect(headers.get('subject')).toBe('Webhook deactivated: Appointment?status=booked&_include=Appointment:patient');
    expect(headers.get('content-type')).toMatch(/^text\/plain/);
    expect(body).toContain(`Subscription:         ${alert.subscriptionId}\n`);
    expect(body).toContain(`Criteria:             ${alert.criteria}\n`);
    expect(body).toContain(`Endpoint:             ${alert.endpoint}\n`);
    expect(body).toContain('HTTP status:          503\n');
    expect(body).toContain(`Error:                ${alert.errorMessage}\n`);
    expect(body).toContain(`Undelivered resource: ${alert.undeliveredResourceUrl}\n`);
    expect(body).toContain(`Deactivated at:       ${alert.deactivatedAt}\n`);
    expect(body).toContain('The next event matching the criteria makes the service send the handshake again');
    expect(body).toContain("the subscription's $reactivate operation");
    expect(body).toContain('`subscriptions reactivate <id>`');
    expect(body).toContain('create a new subscription for the same criteria');
  });

  it('says so when no HTTP response came and no resource was recorded, and keeps each fact on its line', async () => {
    const smtp = await startSmtpServer();
    await mailer(smtp.url).send({ ...alert, httpStatus: undefined, errorMessage: 'connect ECONNREFUSED\r\n  127.0.0.1:9', undeliveredResourceUrl: undefined });
    const { body } = parseMessage(smtp.received[0]!.raw);
    expect(body).toContain('HTTP status:          no HTTP response\n');
    expect(body).toContain('Error:                connect ECONNREFUSED 127.0.0.1:9\n');
    expect(body).toContain('Undelivered resource: none recorded\n');
  });

  it('fails when the SMTP server refuses every recipient, so the job is retried', async () => {
    const smtp = await startSmtpServer(alert.recipients);
    await expect(mailer(smtp.url).send(alert)).rejects.toThrow(/recipients were rejected/);
    expect(smtp.received).toHaveLength(0);
  });

  it('fails when no SMTP server answers', async () => {
    await expect(mailer(`smtp://127.0.0.1:${await freePort()}`).send(alert)).rejects.toThrow(/ECONNREFUSED/);
  });

  it('counts as sent when some recipients took it, and logs the refused ones (a retry would mail the others again)', async () => {
    const smtp = await startSmtpServer(['oncall@example.org']);
    const { logger, logged } = capturingLogger();
    expect(await mailer(smtp.url, logger).send(alert)).toBe('sent');
    expect(smtp.received.map((message) => message.rcptTo)).toEqual([['ops@example.org']]);
    expect(logged()).toMatchObject([{ level: 40, subscriptionId: alert.subscriptionId, rejected: ['oncall@example.org'] }]);
  });

  it('logs instead when the subscription has no contact e-mail', async () => {
    const smtp = await startSmtpServer();
    const { logger, logged } = capturingLogger();
    expect(await mailer(smtp.url, logger).send({ ...alert, recipients: [] })).toBe('logged');
    expect(smtp.received).toHaveLength(0);
    expect(logged()).toMatchObject([{ level: 40, alert: { subscriptionId: alert.subscriptionId, recipients: [] } }]);
  });
});

describe('deactivation alert without SMTP_URL', () => {
  it('is logged at warn with its fields', async () => {
    const { logger, logged } = capturingLogger();
    expect(await mailer(undefined, logger).send(alert)).toBe('logged');
    expect(logged()).toEqual([expect.objectContaining({ level: 40, msg: expect.stringMatching(/no SMTP_URL/), alert })]);
  });

  it('logs only the alert fields, never the channel headers of a wider object passed as the alert', async () => {
    const { logger, logged } = capturingLogger();
    const row = { ...alert, header: ['Authorization: Bearer t0k3n'], secret: 's3cr3t' };
    await mailer(undefined, logger).send(row);
    const [entry] = logged();
    expect(Object.keys(entry.alert).sort()).toEqual([
      'criteria',
      'deactivatedAt',
      'deactivations',
      'endpoint',
      'errorMessage',
      'httpStatus',
      'recipients',
      'subscriptionId',
      'undeliveredResourceUrl',
    ]);
    expect(JSON.stringify(entry)).not.toMatch(/t0k3n|s3cr3t/);
  });
});
