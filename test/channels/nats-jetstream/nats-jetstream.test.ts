import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backportChannelType, channelTypeSystem } from '../../../src/channels/registry.ts';
import { baseUrl, type TestApp } from '../../support/app.ts';
import {
  brokerChannel,
  brokerSubscription,
  currentStatus,
  finishedEncounter,
  retryPolicy,
  startBrokerTestApp,
  subscribed,
  untilAttempt,
  untilAttempts,
  type BrokerTestApp,
} from '../../support/brokers.ts';
import { createTestStream, natsUrl, type TestStream } from '../../support/nats.ts';
import { waitFor } from '../../support/receiver.ts';
import { attemptsOf, untilStatus } from '../../support/subscriptions.ts';

/**
 * The NATS JetStream channel end to end (src/channels/nats-jetstream/): a
 * topic-based subscription made through the API names one of the operator's
 * brokers and a subject, its handshake and its notifications are published to
 * a real JetStream stream on the machine's NATS server, acknowledged, in
 * event-number order, each with a message id for the stream's duplicate
 * window; what the operator did not allow is refused.
 */

let t: TestApp;
let app: BrokerTestApp;
let stream: TestStream;
/** A stream of two messages at most, which refuses more: a consumer that has not read yet. */
let fullStream: TestStream;

beforeAll(async () => {
  stream = await createTestStream();
  fullStream = await createTestStream(natsUrl, { maxMessages: 2 });
  const subjects = [`${stream.prefix}.>`, `${stream.prefix}-unstreamed.>`, `${fullStream.prefix}.>`];
  app = await startBrokerTestApp(
    { events: { type: 'nats-jetstream', url: natsUrl, subjects } },
    { DELIVERY_RETRY_DELAYS_MS: '100', DELIVERY_RESPONSE_TIMEOUT_MS: '2000' },
  );
  t = app.t;
});
afterAll(async () => {
  await app?.close();
  await stream?.close();
  await fullStream?.close();
});

const natsChannel = (endpoint: string, more: Record<string, unknown> = {}) => brokerChannel('nats-jetstream', endpoint, more);
type Bundle = { type: string; entry: { resource: { resourceType: string; type?: string; parameter?: { name: string; valueString?: string }[] } }[] };
const statusOfBundle = (bundle: Bundle) => bundle.entry[0]!.resource;
const notificationType = (bundle: Bundle) => statusOfBundle(bundle).parameter!.find((item) => item.name === 'type')!;

describe('the nats-jetstream channel', () => {
  it('publishes the handshake, then each event in number order, acknowledged, with a message id and the subscription in headers', async () => {
    const endpoint = `nats-jetstream://events/${stream.prefix}.encounters`;
    const id = await subscribed(t, brokerSubscription('nats-1', natsChannel(endpoint)));
    await untilStatus(t, id, 'active');
    for (const n of [1, 2, 3]) await t.fhir('PUT', `/Encounter/nats-${n}`, finishedEncounter(`nats-${n}`, 'nats-1'));

    const messages = await stream.messages(4);
    expect(messages.map((message) => message.subject)).toEqual(Array(4).fill(`${stream.prefix}.encounters`));
    const bundles = messages.map((message) => message.json<Bundle>());
    expect(bundles.map((bundle) => (notificationType(bundle) as { valueCode?: string }).valueCode)).toEqual([
      'handshake',
      'event-notification',
      'event-notification',
      'event-notification',
    ]);
    expect(messages.slice(1).map((message) => message.header.get('Fhir-Last-Event-Number'))).toEqual(['1', '2', '3']);
    expect(new Set(messages.map((message) => message.header.get('Fhir-Subscription')))).toEqual(new Set([id]));
    const messageIds = messages.map((message) => message.header.get('Nats-Msg-Id'));
    expect(new Set(messageIds).size).toBe(4);
    expect(messageIds.every((messageId) => messageId.startsWith(`${id}:`))).toBe(true);
    expect(messages.every((message) => message.header.get('Content-Type') === 'application/fhir+json')).toBe(true);

    // Each event is delivered in the log once the stream acknowledged it, and the attempt says where it went.
    // Recorded a moment after the stream acknowledged the last one.
    const attempts = await untilAttempts(t, id, 4);
    expect(attempts.map((attempt) => [attempt.kind, attempt.outcome])).toEqual([
      ['handshake', 'delivered'],
      ['notification', 'delivered'],
      ['notification', 'delivered'],
      ['notification', 'delivered'],
    ]);
    // The read shows R4's message type and the custom type in the Backport IG's extension.
    const read = await t.fhir('GET', `/Subscription/${id}`);
    expect(read.json<{ resource: { channel: unknown } }>().resource.channel).toMatchObject({
      type: 'message',
      _type: { extension: [{ url: backportChannelType, valueCoding: { system: channelTypeSystem(baseUrl), code: 'nats-jetstream' } }] },
      endpoint,
    });
  });

  it('fails the handshake when no stream takes the subject, and says so', async () => {
    // A subject the operator allows, which no stream of the broker takes.
    const endpoint = `nats-jetstream://events/${stream.prefix}-unstreamed.encounters`;
    const id = await subscribed(t, brokerSubscription('nats-2', natsChannel(endpoint), [retryPolicy(1)]));
    await untilStatus(t, id, 'error');
    const [handshake] = await attemptsOf(t, id);
    expect(handshake).toMatchObject({ kind: 'handshake', outcome: 'failed' });
    expect(handshake!.error).toContain(`no JetStream stream of the broker events takes the subject ${stream.prefix}-unstreamed.encounters`);
  });

  it('waits out a slow consumer: a full stream refuses the publish, which is retried until the consumer has read, none lost, in order', async () => {
    const endpoint = `nats-jetstream://events/${fullStream.prefix}.encounters`;
    // Patient enough for a consumer that reads a few seconds late.
    const id = await subscribed(t, brokerSubscription('nats-slow', natsChannel(endpoint), [retryPolicy(10)]));
    await untilStatus(t, id, 'active');
    // The handshake is one of the two the stream holds; four events follow.
    for (const n of [1, 2, 3, 4]) await t.fhir('PUT', `/Encounter/nats-slow-${n}`, finishedEncounter(`nats-slow-${n}`, 'nats-slow'));
    const refused = await untilAttempt(t, id, 'retrying');
    expect(refused.error).toBe('the stream of the broker events refused the message: maximum messages exceeded');
    // The consumer reads at last, one message at a time, until it has the handshake and the four events.
    const received: number[] = [];
    await waitFor(
      async () => {
        const message = await fullStream.take();
        if (message !== undefined) received.push(Number(message.header?.get('Fhir-Last-Event-Number') || 0));
        return received.length >= 5 ? true : undefined;
      },
      15_000,
      'the handshake and four events',
    );
    expect(received).toEqual([0, 1, 2, 3, 4]);
    expect(await currentStatus(t, id)).toBe('active');
  });

  it.each([
    [
      'a broker the operator does not have',
      natsChannel('nats-jetstream://other/fhir.x'),
      'names the broker other, which this service does not have as a NATS broker (it has events)',
    ],
    ['a subject outside what the broker allows', natsChannel('nats-jetstream://events/fhir.x'), 'is not one the broker events takes from subscriptions'],
    ['a wildcard subject', natsChannel('nats-jetstream://events/fhir.>'), 'channel.endpoint must be nats-jetstream://<broker>/<subject>'],
    ['a host in place of a broker', natsChannel('nats://127.0.0.1:4222/fhir.x'), 'channel.endpoint must be nats-jetstream://<broker>/<subject>'],
    ['headers', natsChannel('nats-jetstream://events/fhir.x', { header: ['Authorization: Bearer x'] }), 'a message to a broker carries its own headers'],
  ])('refuses %s with a 400 naming it', async (_what, channel, message) => {
    const response = await t.fhir('POST', '/Subscription', brokerSubscription('nats-refused', channel));
    expect(response.statusCode).toBe(400);
    expect(response.json<{ issue: { details: { text: string } }[] }>().issue[0]!.details.text).toContain(message);
  });

  it('refuses a subject of more than 255 characters, even one the broker allows: a NATS server would close the connection every subscription shares', async () => {
    const endpoint = `nats-jetstream://events/${stream.prefix}.${'s'.repeat(256 - stream.prefix.length - 1)}`;
    const response = await t.fhir('POST', '/Subscription', brokerSubscription('nats-long', natsChannel(endpoint)));
    expect(response.statusCode).toBe(400);
    expect(response.json<{ issue: { details: { text: string } }[] }>().issue[0]!.details.text).toContain('a subject of at most 255 characters');
    const longest = await t.fhir('POST', '/Subscription', brokerSubscription('nats-long', natsChannel(endpoint.slice(0, -1))));
    expect(longest.statusCode, longest.body).toBe(201);
  });

  it("is found by the Backport IG's custom-channel search, and listed in the CapabilityStatement", async () => {
    const created = await t.fhir('POST', '/Subscription', brokerSubscription('nats-3', natsChannel(`nats-jetstream://events/${stream.prefix}.found`)));
    expect(created.statusCode, created.body).toBe(201);
    const ids = async (query: string) =>
      (await t.fhir('GET', `/Subscription?${query}`)).json<{ entry?: { resource: { id: string } }[] }>().entry?.map((entry) => entry.resource.id) ?? [];
    const { id } = created.json<{ id: string }>();
    expect(await ids('custom-channel=nats-jetstream')).toContain(id);
    expect(await ids(`custom-channel=${encodeURIComponent(`${channelTypeSystem(baseUrl)}|nats-jetstream`)}`)).toContain(id);
    expect(await ids('custom-channel=websocket')).toEqual([]);
    expect(await ids('custom-channel=http://elsewhere|nats-jetstream')).toEqual([]);
    const metadata = (await t.fhir('GET', '/metadata')).json<{
      rest: { resource: { type: string; searchParam: { name: string; definition?: string; documentation?: string }[] }[] }[];
    }>();
    const customChannel = metadata.rest[0]!.resource.find((entry) => entry.type === 'Subscription')!.searchParam.find((item) => item.name === 'custom-channel');
    expect(customChannel).toMatchObject({ definition: 'http://hl7.org/fhir/uv/subscriptions-backport/SearchParameter/Subscription-custom-channel' });
    expect(customChannel!.documentation).toContain(`${channelTypeSystem(baseUrl)}|nats-jetstream`);
  });

  it('is for topic-based subscriptions: a classic criteria keeps rest-hook', async () => {
    const response = await t.fhir('POST', '/Subscription', {
      resourceType: 'Subscription',
      status: 'requested',
      reason: 'classic',
      criteria: 'Patient?family=Nats',
      channel: natsChannel(`nats-jetstream://events/${stream.prefix}.classic`),
    });
    expect(response.statusCode).toBe(400);
  });
});
