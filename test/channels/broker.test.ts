import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { promisify } from 'node:util';
import { connect } from '@nats-io/transport-node';
import amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import { connectionFailure } from '../../src/channels/broker.ts';
import { freePort } from '../support/receiver.ts';

/**
 * The words of a connection to a broker that failed (src/channels/broker.ts):
 * a client reads them in its attempts, so they never say where the
 * operator's brokers are. The errors are the clients' own, from real
 * connections to a port where nothing listens, a host that does not exist
 * and a TLS server whose certificate no one trusts.
 */

const failureOf = async (connecting: Promise<unknown>) => {
  const error = await connecting.then(
    () => undefined,
    (failed: unknown) => failed,
  );
  expect(error, 'the connection should fail').toBeDefined();
  return connectionFailure(error);
};

describe('connectionFailure', () => {
  it("says a connection was refused, in both clients' errors, without the address", async () => {
    const port = await freePort();
    expect(await failureOf(amqp.connect(`amqp://guest:guest@127.0.0.1:${port}`, { timeout: 2_000 }))).toBe('the connection was refused');
    // NATS's own error carries the system's as its cause.
    expect(await failureOf(connect({ servers: `nats://127.0.0.1:${port}`, timeout: 2_000 }))).toBe('the connection was refused');
  });

  it("says a host name did not resolve, without the host's name", async () => {
    expect(await failureOf(amqp.connect('amqp://guest:guest@broker.invalid:5672', { timeout: 2_000 }))).toBe('its host name did not resolve');
  });

  it('says a TLS certificate is not trusted, without the host it was for or the one it names', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'broker-tls-'));
    try {
      await promisify(execFile)('openssl', [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=other.example',
        '-keyout',
        path.join(dir, 'key.pem'),
        '-out',
        path.join(dir, 'cert.pem'),
      ]);
      const server = tls.createServer({ key: await readFile(path.join(dir, 'key.pem')), cert: await readFile(path.join(dir, 'cert.pem')) });
      // The handshake fails on the client's side; the server only sees the socket end.
      server.on('tlsClientError', () => undefined);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const { port } = server.address() as AddressInfo;
      try {
        expect(await failureOf(amqp.connect(`amqps://guest:guest@localhost:${port}`, { timeout: 2_000 }))).toBe('its TLS certificate is not trusted');
      } finally {
        server.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("names the brokers' own refusals, and nothing it does not know (the sender then logs the error for the operator)", () => {
    expect(connectionFailure(new Error('Handshake terminated by server: 403 (ACCESS-REFUSED) with message "ACCESS_REFUSED - Login was refused"'))).toBe(
      "the broker refused the service's credentials",
    );
    expect(connectionFailure(new Error('Hostname/IP does not match: Host: broker.internal.'))).toBeUndefined();
  });
});
