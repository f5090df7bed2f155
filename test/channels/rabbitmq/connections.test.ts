import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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

  it('makes no connection once closed', async () => {
    const closing = new RabbitConnections({ integration: { type: 'rabbitmq', url: rabbitUrl, exchanges: [exchange.exchange] } });
    // The connection is on its way as close() is called: it is closed when it comes, and the publisher refused.
    const opening = closing.publisher('integration', exchange.exchange, 2_000);
    await closing.close();
    await expect(opening).rejects.toThrow('the worker is shutting down');
    await expect(closing.publisher('integration', exchange.exchange, 2_000)).rejects.toThrow('the worker is shutting down');
  });

  it('is undefined for a broker the operator does not have, and fails to connect to one that is down', async () => {
    expect(await connections.publisher('other', exchange.exchange, 2_000)).toBeUndefined();
    const down = new RabbitConnections({ down: { type: 'rabbitmq', url: `amqp://guest:guest@127.0.0.1:${await freePort()}`, exchanges: ['fhir'] } });
    await expect(down.publisher('down', 'fhir', 2_000)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await down.close();
  });
});
