import { connect } from '@nats-io/transport-node';
import amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import { connectionFailure } from '../../src/channels/broker.ts';
import { freePort } from '../support/receiver.ts';

/**
 * The words of a connection to a broker that failed (src/channels/broker.ts):
 * a client reads them in its attempts, so they never say where the
 * operator's brokers are. The errors are the clients' own, from real
 * connections to a port where nothing listens and a host that does not exist.
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

  it('keeps the words of other errors, with any address in them taken out', () => {
    expect(connectionFailure(new Error('Handshake terminated by server: 403 (ACCESS-REFUSED)'))).toBe('Handshake terminated by server: 403 (ACCESS-REFUSED)');
    expect(connectionFailure(new Error('socket hang up talking to 10.1.2.3:5672 and [fd00::1]:4222'))).toBe(
      'socket hang up talking to the broker and the broker',
    );
  });
});
