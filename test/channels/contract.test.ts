import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ShutdownAbort, type CallResult, type ChannelTarget, type Notification } from '../../src/channels/channel.ts';
import { openSendParts, registeredChannels, type SendContext } from '../../src/channels/registry.ts';
import { loadConfig } from '../../src/config/index.ts';
import { connectDatabase } from '../../src/db/database.ts';
import type { ChannelType } from '../../src/db/schema.ts';
import { notificationBundle, statusParameters } from '../../src/topics/notification.ts';
import { addTopics } from '../../src/topics/store.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { createTestStream, natsUrl, type TestStream } from '../support/nats.ts';
import { createTestExchange, rabbitUrl, type TestExchange } from '../support/rabbitmq.ts';
import { freePort, startReceiver, waitFor, type Receiver } from '../support/receiver.ts';

/**
 * The channel contract (src/channels/channel.ts), run against every channel
 * the registry holds, with real parts: a real HTTP receiver on 127.0.0.1 for
 * rest-hook, a real websocket client bound through the API for websocket, and
 * PostgreSQL. A send to a receiver that takes it says delivered and the
 * receiver gets the notification; one that cannot be made says retryable; a
 * refusal for good says permanent; a send started while the worker shuts
 * down (its signal aborted) throws ShutdownAbort; a rest-hook call cut short
 * midway is test/dispatch/graceful-shutdown.test.ts's, a broker's is below. A new channel needs its harness below (the type
 * asks for one per channel type), and is then held to the same contract.
 */

/** What one scenario sends with, and to whom. */
type Scenario = { context: SendContext; target: ChannelTarget };

type Harness = {
  /** A receiver that takes the notification, and what it got (the notification's body), once it did. */
  takes(): Promise<Scenario & { received: () => Promise<unknown> }>;
  /** A send that cannot be made now: nothing answers. */
  unreachable(): Promise<Scenario>;
  /** A receiver that refuses for good; null for a channel nothing answers (its send is a write to the database). */
  refuses: (() => Promise<Scenario>) | null;
};

const topicUrl = 'http://example.org/topics/encounter-complete';
const ig = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';

let t: TestApp;
let context: SendContext;
let stream: TestStream;
let exchange: TestExchange;
const closing: (() => Promise<void>)[] = [];

beforeAll(async () => {
  t = await startTestApp({ listen: true });
  await addTopics(t.database.db, [JSON.parse(readFileSync(new URL('../../examples/topics/encounter-complete.json', import.meta.url), 'utf8'))]);
  stream = await createTestStream();
  closing.push(() => stream.close());
  exchange = await createTestExchange();
  closing.push(() => exchange.close());
  // A broker where nothing answers (unreachable), and the machine's, whose subjects of this file's stream subscriptions may take.
  const brokers = {
    events: { type: 'nats-jetstream' as const, url: natsUrl, subjects: [`${stream.prefix}.>`, `${stream.prefix}-unacknowledged.>`] },
    nowhere: { type: 'nats-jetstream' as const, url: `nats://127.0.0.1:${await freePort()}`, subjects: ['>'] },
    rabbit: { type: 'rabbitmq' as const, url: rabbitUrl, exchanges: [exchange.exchange] },
    'rabbit-nowhere': { type: 'rabbitmq' as const, url: `amqp://guest:guest@127.0.0.1:${await freePort()}`, exchanges: ['fhir'] },
  };
  const delivery = { ...loadConfig({}).delivery, allowPrivateNetworks: true, brokers, responseTimeoutMs: 2_000 };
  const { parts, close } = openSendParts(delivery, undefined);
  closing.push(close);
  context = {
    db: t.database.db,
    delivery,
    logger: { info: () => undefined, warn: () => undefined },
    metrics: { tokenRequestFailed: () => undefined },
    ...parts,
  };
});

afterAll(async () => {
  for (const close of closing.splice(0).reverse()) await close();
  await t?.close();
});

/** A target of `endpoint`, with no headers: what a channel is given to send to. */
const targetAt = (endpoint: string, id: string = randomUUID()): ChannelTarget => ({
  id,
  endpoint,
  headers: [],
  secret: 'contract-secret',
  previousSecret: undefined,
  topic: undefined,
});

async function receiver(): Promise<Receiver> {
  const started = await startReceiver();
  closing.push(() => started.close());
  return started;
}

/** A websocket subscription on the topic, and a real websocket client bound to it (its handshake received). */
async function boundWebsocketClient(): Promise<{ id: string; frames: unknown[] }> {
  const created = await t.fhir('POST', '/Subscription', {
    resourceType: 'Subscription',
    status: 'requested',
    reason: 'the channel contract',
    criteria: topicUrl,
    // A patient of its own: one live subscription per key and criteria.
    _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: `Encounter?patient=Patient/${randomUUID()}` }] },
    channel: {
      type: 'websocket',
      payload: 'application/fhir+json',
      _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'id-only' }] },
    },
  });
  expect(created.statusCode, created.body).toBe(201);
  const id = created.json<{ id: string }>().id;
  const answer = await t.fhir('GET', `/Subscription/${id}/$get-ws-binding-token`);
  expect(answer.statusCode, answer.body).toBe(200);
  const token = answer.json<{ parameter: { name: string; valueString?: string }[] }>().parameter.find((item) => item.name === 'token')!.valueString!;
  const socket = new WebSocket(`${t.baseUrl.replace(/^http/, 'ws')}/fhir/websocket`);
  const frames: unknown[] = [];
  socket.addEventListener('message', (event) => frames.push(JSON.parse(String(event.data))));
  await new Promise<void>((resolve, reject) => {
    socket.addEventListener('open', () => resolve());
    socket.addEventListener('error', () => reject(new Error('could not connect to the websocket endpoint')));
  });
  closing.push(async () => socket.close());
  socket.send(`bind-with-token ${token}`);
  await waitFor(() => (frames.length >= 1 ? frames : undefined), 10_000, 'the handshake');
  return { id, frames };
}

const harnesses: { [Type in ChannelType]: Harness } = {
  'rest-hook': {
    takes: async () => {
      const endpoint = await receiver();
      return { context, target: targetAt(endpoint.url), received: async () => (await endpoint.waitForCalls(1))[0]!.json };
    },
    unreachable: async () => ({ context, target: targetAt(`http://127.0.0.1:${await freePort()}/hook`) }),
    refuses: async () => {
      const endpoint = await receiver();
      endpoint.answer = () => ({ status: 410 });
      return { context, target: targetAt(endpoint.url) };
    },
  },
  websocket: {
    takes: async () => {
      const { id, frames } = await boundWebsocketClient();
      return {
        context,
        target: targetAt('ws://unused', id),
        received: async () => (await waitFor(() => (frames.length >= 2 ? frames : undefined), 10_000, 'the notification'))[1],
      };
    },
    // A database that is not there: nothing takes the notification.
    unreachable: async () => {
      const absent = connectDatabase(`postgres://postgres@127.0.0.1:${await freePort()}/postgres`, () => undefined);
      closing.push(() => absent.close());
      return { context: { ...context, db: absent.db }, target: targetAt('ws://unused') };
    },
    refuses: null,
  },
  'nats-jetstream': {
    takes: async () => {
      const target = targetAt(`nats-jetstream://events/${stream.prefix}.contract`);
      return { context, target, received: async () => (await stream.messages(1))[0]!.json() };
    },
    unreachable: async () => ({ context, target: targetAt('nats-jetstream://nowhere/fhir.contract') }),
    // A broker the operator no longer has: the subscription cannot be published to again.
    refuses: async () => ({ context, target: targetAt('nats-jetstream://removed/fhir.contract') }),
  },
  rabbitmq: {
    takes: async () => {
      const target = targetAt(`rabbitmq://rabbit/${exchange.exchange}/fhir.contract`);
      return { context, target, received: async () => JSON.parse((await exchange.messages(1))[0]!.content.toString('utf8')) as unknown };
    },
    unreachable: async () => ({ context, target: targetAt('rabbitmq://rabbit-nowhere/fhir/fhir.contract') }),
    // A broker the operator no longer has: the subscription cannot be published to again.
    refuses: async () => ({ context, target: targetAt('rabbitmq://removed/fhir/fhir.contract') }),
  },
};

/** An event notification of event `number` of the subscription `target` names, as a sender builds it. */
function notification(target: ChannelTarget, number = 1): Notification {
  const subject = { serviceBase: t.serviceBase, subscriptionId: target.id, topicUrl, payloadContent: 'id-only' as const, status: 'active' as const };
  const event = {
    eventNumber: number,
    timestamp: new Date().toISOString(),
    resourceType: 'Encounter',
    resourceId: `contract-${number}`,
    versionId: 1,
    deleted: false,
  };
  return {
    body: notificationBundle(statusParameters(subject, 'event-notification', number, [event]), subject, [event]),
    message: `Encounter/contract-${number}/_history/1`,
    type: 'event-notification',
    lastEventNumber: number,
  };
}

/** What every result says besides its verdict: when it started and how long it took. */
function expectTimed(result: CallResult): void {
  expect(result.startedAt).toBeInstanceOf(Date);
  expect(result.durationMs).toBeGreaterThanOrEqual(0);
}

describe.each(registeredChannels.map((channel) => [channel.type, channel] as const))('the %s channel', (type, channel) => {
  const harness = harnesses[type];

  it('says delivered when its receiver takes the notification, which the receiver gets', async () => {
    const { context: sendContext, target, received } = await harness.takes();
    const sent = notification(target);
    const result = await channel.send(sendContext, target, sent);
    expect(result.verdict, result.error).toBe('delivered');
    expect(result.error).toBeUndefined();
    expectTimed(result);
    expect(await received()).toEqual(sent.body);
  });

  it('says retryable, with why, when the send cannot be made', async () => {
    const { context: sendContext, target } = await harness.unreachable();
    const result = await channel.send(sendContext, target, notification(target));
    expect(result.verdict).toBe('retryable');
    expect(result.error).toEqual(expect.any(String));
    expectTimed(result);
  });

  it.skipIf(harness.refuses === null)('says permanent, with why, when its receiver refuses for good', async () => {
    const { context: sendContext, target } = await harness.refuses!();
    const result = await channel.send(sendContext, target, notification(target));
    expect(result.verdict).toBe('permanent');
    expect(result.error).toEqual(expect.any(String));
    expectTimed(result);
  });

  it('throws ShutdownAbort, which is not a result, when the worker is shutting down as the send starts (its signal already aborted)', async () => {
    const { context: sendContext, target } = await harness.takes();
    const shutdown = new AbortController();
    shutdown.abort();
    await expect(channel.send(sendContext, target, notification(target), shutdown.signal)).rejects.toBeInstanceOf(ShutdownAbort);
  });

  it('is registered under its own type', () => {
    expect(registeredChannels.filter((registered) => registered.type === type)).toEqual([channel]);
  });
});

describe('a broker send cut short midway', () => {
  it('throws ShutdownAbort as soon as the worker shuts down while it waits for the acknowledgement, not at its timeout', async () => {
    // A plain NATS subscriber on the subject, and no stream: the publish reaches it, and no acknowledgement ever comes.
    const subject = `${stream.prefix}-unacknowledged.contract`;
    const listener = await connect({ servers: natsUrl });
    closing.push(() => listener.close());
    const reached = listener.subscribe(subject, { max: 1 });
    // The server has the subscription before the publish: else it would answer "no responders" at once.
    await listener.flush();
    const target = targetAt(`nats-jetstream://events/${subject}`);
    const patient = { ...context, delivery: { ...context.delivery, responseTimeoutMs: 60_000 } };
    const shutdown = new AbortController();
    const sending = registeredChannels.find((channel) => channel.type === 'nats-jetstream')!.send(patient, target, notification(target), shutdown.signal);
    for await (const _message of reached) break;
    const abortedAt = performance.now();
    shutdown.abort();
    await expect(sending).rejects.toBeInstanceOf(ShutdownAbort);
    expect(performance.now() - abortedAt).toBeLessThan(5_000);
  });
});
