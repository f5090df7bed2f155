import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { baseUrl } from '../support/app.ts';
import { childEnvironment, cliEntry, runCommand } from '../support/commands.ts';
import { closedAtFileEnd, stackWith } from '../support/dispatch-stack.ts';
import { waitFor } from '../support/receiver.ts';
import { startSmtpServerOnLoopback, type SmtpServer } from '../support/smtp.ts';
import { subscribe, untilStatus } from '../support/subscriptions.ts';

const { closeAtEnd, receiver } = closedAtFileEnd();

/** A real SMTP server on loopback (test/support/smtp.ts), closed after the file. */
async function startSmtpServer(): Promise<SmtpServer> {
  const server = await startSmtpServerOnLoopback();
  closeAtEnd(() => server.close());
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

  it(
    'records every deactivation and mails the first at once, then at most one e-mail per interval telling how many came since',
    { timeout: 60_000 },
    async () => {
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
      const alerts = () =>
        t.database.pool.query<Row>(
          'SELECT id::text, handled_as, handled_at, deactivations_told, told_in::text FROM webhook.deactivation_alerts WHERE subscription_id = $1 ORDER BY id',
          [id],
        );
      // Every deactivation told, the last ones at the end of their interval.
      const rows = await waitFor(
        async () => {
          const { rows } = await alerts();
          return rows.every((row) => row.handled_as !== null) ? rows : undefined;
        },
        15_000,
        'every deactivation told',
      );
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
      const cli = (...args: string[]) =>
        runCommand(process.execPath, [cliEntry, 'subscriptions', ...args], childEnvironment({ DATABASE_URL: t.database.url, LOG_LEVEL: 'warn' }));
      const listed = (await cli('list')).output.split('\n').find((line) => line.startsWith(id));
      expect(listed).toMatch(new RegExp(`^${id}\\s+\\w+\\s+\\d+\\s+${rows.length}\\s`));
      expect((await cli('show', id)).output).toMatch(
        new RegExp(`\\n {2}in error {2}${rows.length} times in the last 24 hours, \\d+ in a row without a delivery \\(flapping: `),
      );
      const exposed = await createMetrics(t.database.db).registry.metrics();
      expect(exposed).toContain('fhir_webhooks_flapping_subscriptions 1\n');
      expect(exposed).toContain(`fhir_webhooks_subscription_deactivations_last_day_max ${rows.length}\n`);
      expect(exposed).not.toContain(id);
    },
  );
});
