import net, { type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShutdownAbort } from '../../../src/channels/channel.ts';
import type { Brokers } from '../../../src/config/brokers.ts';
import { RabbitConnections } from '../../../src/channels/rabbitmq/connections.ts';
import { createTestExchange, rabbitUrl, type TestExchange } from '../../support/rabbitmq.ts';
import { freePort } from '../../support/receiver.ts';

/**
 * A process's connections to the operator's RabbitMQ brokers
 * (src/channels/rabbitmq/connections.ts), against the machine's RabbitMQ:
 * what one exchange's refusal does to the others, and what a publish that
 * failed says.
 */

const missingExchange = 'fhir-webhooks-test-never-declared';
const content = Buffer.from('{}');

let exchange: TestExchange;
let connections: RabbitConnections;

beforeAll(async () => {
  exchange = await createTestExchange();
  const brokers: Brokers = { integration: { type: 'rabbitmq', url: rabbitUrl, exchanges: [exchange.exchange, missingExchange] } };
  connections = new RabbitConnections(brokers);
});
afterAll(async () => {
  await connections?.close();
  await exchange?.close();
});

const publish = async (to: string, messageId: string, routingKey = 'fhir.connections') => {
  const publisher = await connections.publisher('integration', to, 2_000);
  return publisher!.publish(to, routingKey, content, { messageId }, 2_000);
};

describe('RabbitConnections', () => {
  it("keeps one exchange's refusal to that exchange: the other exchanges' publishes in flight on the connection are confirmed", async () => {
    await publish(exchange.exchange, 'warm-up');
    // Sent together, before the broker's refusal of the first can come back: on a channel shared with it, the others would fail with it.
    const results = await Promise.allSettled([
      publish(missingExchange, 'refused'),
      ...Array.from({ length: 20 }, (_, n) => publish(exchange.exchange, `beside-${n}`)),
    ]);
    expect(results[0]).toMatchObject({ status: 'rejected' });
    expect(results.slice(1).map((result) => result.status)).toEqual(Array.from({ length: 20 }, () => 'fulfilled'));
    // And after it: the connection stays, and the refused exchange's next publish opens another channel (and is refused again).
    await expect(publish(exchange.exchange, 'after')).resolves.toBe('confirmed');
    await expect(publish(missingExchange, 'refused-again')).rejects.toThrow(/no exchange/);
    expect((await exchange.messages(22)).map((message) => message.properties.messageId)).toEqual([
      'warm-up',
      ...Array.from({ length: 20 }, (_, n) => `beside-${n}`),
      'after',
    ]);
  });

  it("says why the broker refused: its 404's words, without the operator's virtual host", async () => {
    const refusal = await publish(missingExchange, 'why').catch((error: Error) => error.message);
    expect(refusal).toBe(`the broker closed the channel: 404 NOT_FOUND - no exchange '${missingExchange}'`);
  });

  it('tells a publish that no queue took the message (returned), and the next one of the same id that one did', async () => {
    await expect(publish(exchange.exchange, 'unroutable', 'unbound.key')).resolves.toBe('returned');
    await expect(publish(exchange.exchange, 'unroutable')).resolves.toBe('confirmed');
  });

  it("gives up on a connection whose path went dead within the send's timeout, not the heartbeats' minutes, and makes a new one at the next send", async () => {
    const path = await startFreezableProxy(new URL(rabbitUrl));
    const via = new RabbitConnections({ via: { type: 'rabbitmq', url: path.url, exchanges: [exchange.exchange, missingExchange] } });
    try {
      const publisher = await via.publisher('via', exchange.exchange, 2_000);
      await expect(publisher!.publish(exchange.exchange, 'fhir.connections', content, { messageId: 'before' }, 2_000)).resolves.toBe('confirmed');
      path.freeze();
      // Another exchange needs another channel, which the broker can no longer open: refused in time.
      const started = performance.now();
      await expect(via.publisher('via', missingExchange, 1_000)).rejects.toThrow('timeout');
      expect(performance.now() - started).toBeLessThan(10_000);
      // The dead connection is forgotten: the next send connects again (a new path, which passes).
      const again = await via.publisher('via', exchange.exchange, 2_000);
      expect(again).not.toBe(publisher);
      await expect(again!.publish(exchange.exchange, 'fhir.connections', content, { messageId: 'after' }, 2_000)).resolves.toBe('confirmed');
    } finally {
      const closing = performance.now();
      await via.close();
      // The dead connection's close is not waited for past its bound.
      expect(performance.now() - closing).toBeLessThan(10_000);
      await path.close();
    }
    expect((await exchange.messages(2)).slice(-2).map((message) => message.properties.messageId)).toEqual(['before', 'after']);
  });

  it('makes no connection once closed', async () => {
    const closing = new RabbitConnections({ integration: { type: 'rabbitmq', url: rabbitUrl, exchanges: [exchange.exchange] } });
    // The connection is on its way as close() is called: it is closed when it comes, and the publisher refused.
    const opening = closing.publisher('integration', exchange.exchange, 2_000);
    await closing.close();
    // Not a failure to record as an attempt: the send goes again after the restart.
    await expect(opening).rejects.toBeInstanceOf(ShutdownAbort);
    await expect(closing.publisher('integration', exchange.exchange, 2_000)).rejects.toBeInstanceOf(ShutdownAbort);
  });

  it('is undefined for a broker the operator does not have, and fails to connect to one that is down', async () => {
    expect(await connections.publisher('other', exchange.exchange, 2_000)).toBeUndefined();
    const down = new RabbitConnections({ down: { type: 'rabbitmq', url: `amqp://guest:guest@127.0.0.1:${await freePort()}`, exchanges: ['fhir'] } });
    await expect(down.publisher('down', 'fhir', 2_000)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await down.close();
  });
});

/**
 * A TCP path to a broker that can go dead: after freeze(), the connections
 * made so far pass nothing either way and stay open, as behind a network
 * that drops packets; connections made later pass.
 */
async function startFreezableProxy(broker: URL): Promise<{ url: string; freeze(): void; close(): Promise<void> }> {
  const frozen = new Set<net.Socket>();
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(broker.port || 5672), broker.hostname);
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      sockets.add(from);
      from.on('data', (data: Buffer) => frozen.has(from) || to.write(data));
      from.on('error', () => undefined);
      from.on('close', () => to.destroy());
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const proxied = new URL(broker);
  proxied.host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: proxied.toString(),
    freeze: () => sockets.forEach((socket) => frozen.add(socket)),
    close: async () => {
      sockets.forEach((socket) => socket.destroy());
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
