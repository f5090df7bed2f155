import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../../support/app.ts';
import { childEnvironment, cliEntry, startCommand, stopStartedCommands } from '../../support/commands.ts';
import { startReceiver, waitFor, type Receiver } from '../../support/receiver.ts';
import { attemptsOf, subscribe, untilStatus } from '../../support/subscriptions.ts';

/**
 * An https endpoint whose certificate comes from a private CA, as inside a
 * company: the workers trust it only when the process is started with the CA
 * in NODE_EXTRA_CA_CERTS (Node reads it once, at start: hence worker processes).
 */

const run = promisify(execFile);
const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  await stopStartedCommands();
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** A CA and a certificate it signs for 127.0.0.1, made with openssl in `dir`. */
async function privateCertificates(dir: string): Promise<{ caFile: string; key: string; cert: string }> {
  const file = (name: string) => path.join(dir, name);
  const ecKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  await run('openssl', [
    'req',
    '-x509',
    ...ecKey,
    '-keyout',
    file('ca.key'),
    '-out',
    file('ca.pem'),
    '-days',
    '2',
    '-subj',
    '/CN=Webhook test CA',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign',
  ]);
  await run('openssl', ['req', ...ecKey, '-keyout', file('server.key'), '-out', file('server.csr'), '-subj', '/CN=127.0.0.1']);
  await writeFile(file('server.ext'), 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n');
  await run('openssl', [
    'x509',
    '-req',
    '-in',
    file('server.csr'),
    '-CA',
    file('ca.pem'),
    '-CAkey',
    file('ca.key'),
    '-CAcreateserial',
    '-out',
    file('server.pem'),
    '-days',
    '2',
    '-extfile',
    file('server.ext'),
  ]);
  return { caFile: file('ca.pem'), key: await readFile(file('server.key'), 'utf8'), cert: await readFile(file('server.pem'), 'utf8') };
}

function startWorkerProcess(t: TestApp, extraCaCerts: string | undefined) {
  return startCommand(process.execPath, [cliEntry, 'worker'], {
    ...childEnvironment({
      DATABASE_URL: t.database.url,
      SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'),
      BASE_URL: baseUrl,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      MIGRATE_ON_START: 'false',
      // info, for its "Workers running": a signal before it ends the process at once (exit 143), not in order.
      LOG_LEVEL: 'info',
      DELIVERY_RETRY_DELAYS_MS: '200',
      DELIVERY_MAX_FAILURES: '1000',
    }),
    NODE_EXTRA_CA_CERTS: extraCaCerts,
  });
}

describe('an https endpoint with a certificate from a private CA', () => {
  it(
    'fails its handshake (a retryable certificate error) until the workers trust the CA through NODE_EXTRA_CA_CERTS, then delivers over TLS',
    { timeout: 90_000 },
    async () => {
      const dir = await mkdtemp(path.join(tmpdir(), 'https-endpoint-'));
      cleanups.push(() => rm(dir, { recursive: true, force: true }));
      const { caFile, key, cert } = await privateCertificates(dir);
      const t = await startTestApp();
      cleanups.push(() => t.close());
      const receiver: Receiver = await startReceiver({ tls: { key, cert } });
      cleanups.push(() => receiver.close());
      expect(receiver.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/hook$/);

      // Without the CA: the TLS handshake fails before any HTTP request, and the attempt says why.
      const untrusting = startWorkerProcess(t, undefined);
      const { id } = await subscribe(t, 'Patient?family=Tls', receiver.url);
      const [refused] = await waitFor(
        async () => {
          const attempts = await attemptsOf(t, id);
          return attempts.length > 0 ? attempts : undefined;
        },
        30_000,
        'the first handshake attempt',
      );
      expect(refused).toMatchObject({ kind: 'handshake', outcome: 'retrying', http_status: null });
      expect(refused!.error).toMatch(/^UNABLE_TO_VERIFY_LEAF_SIGNATURE: unable to verify the first certificate/);
      expect(receiver.calls).toEqual([]);
      await untrusting.waitFor(/Workers running/);
      untrusting.interrupt('SIGTERM');
      expect(await untrusting.exited).toBe(0);

      // With the CA: the next try of the handshake succeeds, and notifications follow.
      startWorkerProcess(t, caFile);
      await untilStatus(t, id, 'active', 30_000);
      const written = await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Tls' }] });
      expect(written.statusCode).toBe(201);
      const patientId = written.json<{ id: string }>().id;
      // The attempt is recorded once the call has returned.
      const delivered = await waitFor(
        async () => (await attemptsOf(t, id)).find((attempt) => attempt.kind === 'notification'),
        30_000,
        'the notification over https',
      );
      expect(delivered).toMatchObject({ outcome: 'delivered', http_status: 200, resource_id: patientId });
      expect(receiver.calls.map((call) => call.json.id)).toContain(patientId);
    },
  );
});
