import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { childEnvironment, cliEntry, runCommand, startCommand, stopStartedCommands, type Running } from '../support/commands.ts';
import { freePort, startReceiver, type Receiver } from '../support/receiver.ts';
import { attemptsOf, statusOf, subscribe, untilStatus } from '../support/subscriptions.ts';

/**
 * `subscriptions reactivate ID` acts as the running service does (issue 33):
 * the service runs as `serve` with its own settings (a PORT and so a
 * BASE_URL of its own, private networks allowed, its secrets key); the CLI
 * runs with the database only. The handshake is the service's, and nothing
 * missing from the CLI's shell is recorded against the subscriber.
 */

let t: TestApp;
let service: Running;
let servicePort: number;
let endpoint: Receiver;

/** The service's settings, none of which the CLI below is given. */
const serviceEnvironment = (port: number) =>
  childEnvironment({
    DATABASE_URL: t.database.url,
    SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'),
    PORT: String(port),
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    LOG_LEVEL: 'info',
  });
const cli = (...args: string[]) =>
  runCommand(process.execPath, [cliEntry, 'subscriptions', 'reactivate', ...args], childEnvironment({ DATABASE_URL: t.database.url, LOG_LEVEL: 'warn' }));

beforeAll(async () => {
  t = await startTestApp();
  endpoint = await startReceiver();
  servicePort = await freePort();
  service = startCommand(process.execPath, [cliEntry, 'serve'], serviceEnvironment(servicePort));
  await service.waitFor(/Listening on/);
}, 60_000);
afterAll(async () => {
  await stopStartedCommands();
  await endpoint?.close();
  await t?.close();
});

/** A subscription on `criteria`, made active by the service's workers, then put in error as a refused event leaves it. */
async function inError(criteria: string): Promise<string> {
  const { id } = await subscribe(t, criteria, endpoint.url);
  await untilStatus(t, id, 'active');
  await t.database.pool.query(`UPDATE webhook.subscriptions SET status = 'error', error = 'HTTP 503 from the receiver' WHERE id = $1`, [id]);
  return id;
}

const leftBehind = async () =>
  (
    await t.database.pool.query<{ requests: number; jobs: number }>(
      `SELECT (SELECT count(*)::int FROM webhook.reactivation_requests) AS requests,
              (SELECT count(*)::int FROM graphile_worker.jobs WHERE task_identifier = 'subscription_reactivation_request') AS jobs`,
    )
  ).rows[0]!;

describe('subscriptions reactivate ID, against a service started with other settings', () => {
  it(
    "sends the service's handshake (its base URL, its SSRF policy), whatever the CLI's shell lacks, and says what became of it",
    { timeout: 60_000 },
    async () => {
      const id = await inError('Patient?family=CliThroughService');
      const before = endpoint.calls.length;

      endpoint.answer = () => ({ status: 503 });
      const refused = await cli(id);
      expect(refused.exitCode, refused.output).toBe(1);
      expect(refused.output).toBe(`Subscription/${id} was not reactivated. Reactivation handshake failed: HTTP 503 from ${endpoint.url}.\n`);

      endpoint.answer = () => ({ status: 200 });
      const done = await cli(id);
      expect(done.exitCode, done.output).toBe(0);
      expect(done.output).toBe(
        `Reactivated subscription ${id}: its receiver answered the handshake with HTTP 200; it is active. The events it missed while in error are not sent (docs/operators.md says how to catch up).\n`,
      );
      expect(await statusOf(t, id)).toEqual({ status: 'active', error: null, failure_count: 0 });
      // Both handshakes reached the receiver (the CLI's shell does not allow private networks), naming the service's URLs (its PORT, no BASE_URL).
      expect(endpoint.calls).toHaveLength(before + 2);
      for (const handshake of endpoint.calls.slice(before)) {
        expect(handshake.json).toMatchObject({
          type: 'history',
          entry: [
            {
              resource: {
                type: 'handshake',
                status: 'error',
                subscription: { reference: `http://localhost:${servicePort}/fhir/resources/Subscription/${id}` },
              },
            },
          ],
        });
        expect(handshake.headers.secret).toBe('top-secret');
      }
      // Recorded: the receiver's answers only, never a refusal of the CLI's making.
      const handshakes = (await attemptsOf(t, id)).filter((attempt) => attempt.kind === 'handshake').slice(1);
      expect(handshakes.map(({ outcome, http_status, error }) => ({ outcome, http_status, error }))).toEqual([
        { outcome: 'failed', http_status: 503, error: 'HTTP 503' },
        { outcome: 'delivered', http_status: 200, error: null },
      ]);

      const again = await cli(id);
      expect(again.exitCode).toBe(1);
      expect(again.output).toBe(`Subscription/${id} is active: only a subscription in error is reactivated.\n`);
      const unknown = await cli('00000000-0000-4000-8000-000000000000');
      expect(unknown.exitCode).toBe(1);
      expect(unknown.output).toBe('Subscription/00000000-0000-4000-8000-000000000000 is not known.\n');
      expect(await leftBehind()).toEqual({ requests: 0, jobs: 0 });
    },
  );

  it('says so when no worker of the service takes the request, sending and recording nothing', { timeout: 60_000 }, async () => {
    const id = await inError('Patient?family=CliNoService');
    service.interrupt();
    expect(await service.exited).toBe(0);
    const before = endpoint.calls.length;
    const attempts = (await attemptsOf(t, id)).length;
    const run = await cli(id, '--wait', '1');
    expect(run.exitCode, run.output).toBe(1);
    expect(run.output).toBe(
      'No worker of the service took the request within 1 second: is the service running (npm start, or npm run cli -- serve or worker) on this database? Nothing was sent.\n',
    );
    expect(endpoint.calls).toHaveLength(before);
    expect(await attemptsOf(t, id)).toHaveLength(attempts);
    expect(await statusOf(t, id)).toMatchObject({ status: 'error', error: 'HTTP 503 from the receiver' });
    expect(await leftBehind()).toEqual({ requests: 0, jobs: 0 });
  });
});
