import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket as WsClient } from 'ws';
import { createApiKey } from '../../../src/auth/api-keys.ts';
import { loadConfig, type WebsocketLimits } from '../../../src/config/index.ts';
import type { CallContext, Target } from '../../../src/dispatch/subscriber.ts';
import { websocket } from '../../../src/channels/websocket/channel.ts';
import { startWorkers, type Workers } from '../../../src/dispatch/worker.ts';
import { createMetrics } from '../../../src/metrics/metrics.ts';
import { notificationBundle, statusParameters } from '../../../src/topics/notification.ts';
import { addTopics } from '../../../src/topics/store.ts';
import { startTestApp, testSecretsKey, type TestApp } from '../../support/app.ts';
import { eventNumbers, notificationProblems, statusValue, type Json } from '../../support/backport-conformance.ts';
import { childEnvironment, cliEntry, startCommand, stopStartedCommands } from '../../support/commands.ts';
import { freePort, waitFor } from '../../support/receiver.ts';
import { untilDelivered } from '../../support/subscriptions.ts';

/**
 * The websocket channel (Backport IG, channel type websocket) end to end: a
 * real websocket client (Node's WebSocket, undici's; `ws` for a client that
 * stops reading) on the API's port, binding with $get-ws-binding-token's
 * token, while real workers send the events of the same log as rest-hook's.
 */

const topicUrl = 'http://example.org/topics/encounter-complete';
const ig = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';
const limits: WebsocketLimits = {
  maxConnections: 12,
  maxConnectionsPerKey: 5,
  idleTimeoutMs: 60_000,
  bindTimeoutMs: 5_000,
  maxUnboundPerAddress: 10,
  maxMessageBytes: 1024,
  sendBufferBytes: 64 * 1024,
  bindingTokenSeconds: 300,
};

let t: TestApp;
let workers: Workers;
const metrics = createMetrics();
const clients: Client[] = [];

beforeAll(async () => {
  t = await startTestApp({ listen: true, websocket: limits, outbound: { delivery: loadConfig({}).delivery, oauth: undefined, metrics } });
  workers = await startWorkers(loadConfig({ BASE_URL: t.baseUrl, DELIVERY_RETRY_DELAYS_MS: '100' }), t.database, testSecretsKey, pino({ level: 'silent' }));
  await addTopics(t.database.db, [JSON.parse(readFileSync(new URL('../../../examples/topics/encounter-complete.json', import.meta.url), 'utf8'))]);
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.close()));
});
afterAll(async () => {
  await stopStartedCommands();
  await workers?.stop();
  await t?.close();
});

const encounter = (id: string, patient: string, extra: Record<string, unknown> = {}) => ({
  resourceType: 'Encounter',
  id,
  status: 'finished',
  class: { code: 'AMB' },
  subject: { reference: patient },
  ...extra,
});

function websocketSubscription(patient: string, { content = 'id-only', channelExtensions = [] as unknown[], channel = {} } = {}) {
  return {
    resourceType: 'Subscription',
    status: 'requested',
    reason: 'Encounters that became finished, to a browser app',
    criteria: topicUrl,
    _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: `Encounter?patient=${patient}` }] },
    channel: {
      ...(channelExtensions.length === 0 ? {} : { extension: channelExtensions }),
      type: 'websocket',
      payload: 'application/fhir+json',
      _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: content }] },
      ...channel,
    },
  };
}

async function createWebsocketSubscription(
  patient: string,
  options: Parameters<typeof websocketSubscription>[1] = {},
  app: TestApp = t,
): Promise<{ id: string; created: Json }> {
  const response = await app.fhir('POST', '/Subscription', websocketSubscription(patient, options));
  expect(response.statusCode, response.body).toBe(201);
  const created = response.json<Json>();
  return { id: created.id as string, created };
}

/** $get-ws-binding-token of one subscription: the token and the Parameters. */
async function bindingToken(id: string, headers: Record<string, string> = {}): Promise<{ token: string; answer: Json }> {
  const response = await t.fhir('GET', `/Subscription/${id}/$get-ws-binding-token`, undefined, headers);
  expect(response.statusCode, response.body).toBe(200);
  const answer = response.json<Json>();
  return { token: answer.parameter.find((item: Json) => item.name === 'token').valueString, answer };
}

type Client = {
  /** Every text frame received, parsed. */
  frames: Json[];
  send(text: string | Buffer): void;
  /** Waits until `count` frames have come; returns them all. */
  framesAfter(count: number, timeoutMs?: number): Promise<Json[]>;
  closed: Promise<{ code: number; reason: string }>;
  close(): Promise<void>;
};

/** A real websocket client (Node's WebSocket) on `url`, once open. */
async function connect(url = `${t.baseUrl.replace(/^http/, 'ws')}/fhir/websocket`): Promise<Client> {
  const socket = new WebSocket(url);
  const frames: Json[] = [];
  socket.addEventListener('message', (event) => frames.push(JSON.parse(String(event.data)) as Json));
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    socket.addEventListener('close', (event) => resolve({ code: event.code, reason: event.reason })),
  );
  await new Promise<void>((resolve, reject) => {
    socket.addEventListener('open', () => resolve());
    socket.addEventListener('error', () => reject(new Error(`could not connect to ${url}`)));
  });
  const client: Client = {
    frames,
    send: (text) => socket.send(text),
    framesAfter: (count, timeoutMs = 10_000) =>
      waitFor(() => (frames.length >= count ? frames : undefined), timeoutMs, `${count} frames (have ${frames.length})`),
    closed,
    close: async () => {
      if (socket.readyState === WebSocket.OPEN || socket.readyState === WebSocket.CONNECTING) socket.close();
      await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 2000))]);
    },
  };
  clients.push(client);
  return client;
}

/** Connects and binds to `id`: the client, once its handshake came. */
async function bound(id: string): Promise<Client> {
  const client = await connect();
  client.send(`bind-with-token ${(await bindingToken(id)).token}`);
  await client.framesAfter(1);
  expect(statusValue(client.frames[0]!, 'type')).toBe('handshake');
  return client;
}

const scrape = async () => {
  const samples = new Map<string, number>();
  for (const line of (await metrics.registry.metrics()).split('\n')) {
    const match = /^(fhir_webhooks_websocket_\S+) (\S+)$/.exec(line);
    if (match) samples.set(match[1]!, Number(match[2]));
  }
  return samples;
};

describe('a websocket subscription', () => {
  it('is created on a topic without an endpoint, active at once, read back, counted by $status, and switched off like a rest-hook one', async () => {
    const { id, created } = await createWebsocketSubscription('Patient/created', {
      channelExtensions: [{ url: `${ig}/backport-heartbeat-period`, valueUnsignedInt: 60 }],
    });
    expect(created).toMatchObject({ status: 'active', criteria: topicUrl, channel: { type: 'websocket', payload: 'application/fhir+json' } });
    expect(created.channel.endpoint).toBeUndefined();
    expect(created.channel.header).toBeUndefined();
    const read = (await t.fhir('GET', `/Subscription/${id}`)).json<Json>().resource;
    expect(read.channel).toEqual(created.channel);
    const status = (await t.fhir('GET', `/Subscription/${id}/$status`)).json<Json>();
    expect(statusValue(status, 'status')).toBe('active');
    // Nothing was called: no handshake job, no attempt.
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS calls FROM webhook.delivery_attempts WHERE subscription_id = $1', [id]);
    expect(rows[0].calls).toBe(0);
    const off = await t.fhir('POST', '/Subscription', { ...websocketSubscription('Patient/created'), status: 'off' });
    expect(off.statusCode, off.body).toBe(200);
    expect(off.json<Json>()).toMatchObject({ id, status: 'off', channel: { type: 'websocket' } });
  });

  it.each([
    [
      'an endpoint',
      { channel: { endpoint: 'https://example.org/hook' } },
      "channel.endpoint is for rest-hook: a websocket subscription's clients connect to the service",
    ],
    ['headers', { channel: { header: ['Authorization: Bearer x'] } }, 'channel.header is sent with rest-hook calls; a websocket subscription has none'],
    [
      'a backport-timeout',
      { channelExtensions: [{ url: `${ig}/backport-timeout`, valueUnsignedInt: 5 }] },
      "channel's backport-timeout is about calls to a rest-hook endpoint",
    ],
  ])('refuses %s with a 400 naming it', async (_name, options, reason) => {
    const response = await t.fhir('POST', '/Subscription', websocketSubscription('Patient/refused', options));
    expect(response.statusCode).toBe(400);
    expect(response.json<Json>().issue[0].details.text).toContain(reason);
  });

  it("keeps the specification's rest-hook-only refusal for a classic (criteria) subscription", async () => {
    const response = await t.fhir('POST', '/Subscription', {
      resourceType: 'Subscription',
      status: 'requested',
      reason: 'x',
      criteria: 'Encounter?status=finished',
      channel: { type: 'websocket', payload: 'application/fhir+json' },
    });
    expect(response.statusCode).toBe(400);
    expect(response.json<Json>().issue[0].details.text).toBe("ValidationError: ['Only channel=rest-hook subscriptions are supported']");
  });
});

describe('$get-ws-binding-token', () => {
  it('answers the IG Parameters at the instance and the type level, by GET and by POST, for websocket subscriptions the key sees', async () => {
    const { id } = await createWebsocketSubscription('Patient/token');
    const { token, answer } = await bindingToken(id);
    expect(token).toMatch(/^fwt_[A-Za-z0-9_-]{43}$/);
    const value = (name: string) => answer.parameter.filter((item: Json) => item.name === name);
    expect(value('subscription')).toEqual([{ name: 'subscription', valueString: `${t.serviceBase}/Subscription/${id}` }]);
    expect(value('websocket-url')).toEqual([{ name: 'websocket-url', valueUrl: `${t.baseUrl.replace(/^http/, 'ws')}/fhir/websocket` }]);
    // The IG's discovery: the CapabilityStatement names the same URL, and the operation.
    const statement = (await t.fhir('GET', '/metadata')).json<Json>();
    expect(statement.rest[0].extension).toEqual([
      { url: 'http://hl7.org/fhir/StructureDefinition/capabilitystatement-websocket', valueUri: value('websocket-url')[0].valueUrl },
    ]);
    expect(statement.rest[0].resource.find((entry: Json) => entry.type === 'Subscription').operation).toContainEqual({
      name: 'get-ws-binding-token',
      definition: 'http://hl7.org/fhir/uv/subscriptions-backport/OperationDefinition/backport-subscription-get-ws-binding-token',
    });
    const expiresIn = Date.parse(value('expiration')[0].valueDateTime) - Date.now();
    expect(expiresIn).toBeGreaterThan((limits.bindingTokenSeconds - 10) * 1000);
    expect(expiresIn).toBeLessThanOrEqual(limits.bindingTokenSeconds * 1000);
    // Only the token's digest is stored.
    const { rows } = await t.database.pool.query('SELECT token_sha256 FROM webhook.websocket_binding_tokens');
    expect(JSON.stringify(rows)).not.toContain(token);

    const byPost = await t.fhir('POST', '/Subscription/$get-ws-binding-token', { resourceType: 'Parameters', parameter: [{ name: 'id', valueId: id }] });
    expect(byPost.statusCode, byPost.body).toBe(200);
    expect(byPost.json<Json>().parameter.filter((item: Json) => item.name === 'subscription')).toHaveLength(1);
    const every = (await t.fhir('GET', '/Subscription/$get-ws-binding-token')).json<Json>();
    expect(every.parameter.map((item: Json) => item.valueString)).toContain(`${t.serviceBase}/Subscription/${id}`);
  });

  it("refuses another key's subscription (404), a rest-hook subscription and an unknown parameter (400)", async () => {
    const { id } = await createWebsocketSubscription('Patient/theirs');
    const { key: other } = await createApiKey(t.database.db, 'another client', ['read', 'write']);
    const stolen = await t.fhir('GET', `/Subscription/${id}/$get-ws-binding-token`, undefined, { 'x-api-key': other });
    expect(stolen.statusCode).toBe(404);
    const restHook = await t.fhir('POST', '/Subscription', {
      ...websocketSubscription('Patient/rest-hook'),
      channel: {
        type: 'rest-hook',
        endpoint: 'http://127.0.0.1:9/none',
        payload: 'application/fhir+json',
        _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'empty' }] },
      },
    });
    const refused = await t.fhir('GET', `/Subscription/${restHook.json<Json>().id}/$get-ws-binding-token`);
    expect(refused.statusCode).toBe(400);
    expect(refused.json<Json>().issue[0].details.text).toContain('has channel type rest-hook: a binding token is for websocket subscriptions');
    const unknown = await t.fhir('GET', `/Subscription/$get-ws-binding-token?subscription=${id}`);
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json<Json>().issue[0].details.text).toContain("Unknown parameter 'subscription'");
  });
});

describe('a bound client', () => {
  it.each(['empty', 'id-only', 'full-resource'] as const)('gets a handshake, then each event as a %s notification, numbers in order', async (content) => {
    const patient = `Patient/levels-${content}`;
    const { id } = await createWebsocketSubscription(patient, { content });
    const client = await bound(id);
    expect(notificationProblems(client.frames[0]!, { subscriptionId: id, type: 'handshake', status: 'active', content })).toEqual([]);
    expect(statusValue(client.frames[0]!, 'events-since-subscription-start')).toBe('0');
    for (const n of [1, 2, 3]) await t.fhir('PUT', `/Encounter/levels-${content}-${n}`, encounter(`levels-${content}-${n}`, patient));
    const frames = await client.framesAfter(4);
    for (const frame of frames.slice(1))
      expect(notificationProblems(frame, { subscriptionId: id, type: 'event-notification', status: 'active', content })).toEqual([]);
    expect(frames.slice(1).flatMap((frame) => eventNumbers(frame))).toEqual([1, 2, 3]);
    const focus = frames[1]!.entry[1];
    if (content === 'empty') expect(frames[1]!.entry).toHaveLength(1);
    if (content === 'id-only') expect(focus).toMatchObject({ fullUrl: `${t.serviceBase}/Encounter/levels-${content}-1` });
    if (content === 'id-only') expect(focus.resource).toBeUndefined();
    if (content === 'full-resource') expect(focus.resource).toMatchObject({ resourceType: 'Encounter', id: `levels-${content}-1` });
    // The log records each as delivered, to one client.
    const { rows } = await t.database.pool.query(`SELECT outcome, response_excerpt FROM webhook.delivery_attempts WHERE subscription_id = $1 ORDER BY id`, [
      id,
    ]);
    expect(rows).toEqual(Array.from({ length: 3 }, () => ({ outcome: 'delivered', response_excerpt: 'published to 1 bound websocket client' })));
  });

  it('recovers the events written while no client was bound with $events: the handshake tells the latest number', async () => {
    const patient = 'Patient/gap';
    const { id } = await createWebsocketSubscription(patient);
    for (const n of [1, 2]) await t.fhir('PUT', `/Encounter/gap-${n}`, encounter(`gap-${n}`, patient));
    // Sent with no client bound: numbered, delivered to the log.
    await untilDelivered(t, id, 2);
    const { rows: attempts } = await t.database.pool.query(`SELECT response_excerpt FROM webhook.delivery_attempts WHERE subscription_id = $1`, [id]);
    expect(attempts.map((row) => row.response_excerpt)).toEqual(
      Array.from({ length: 2 }, () => 'no websocket client bound: the notification stays in the log ($events)'),
    );
    const client = await bound(id);
    expect(statusValue(client.frames[0]!, 'events-since-subscription-start')).toBe('2');
    const missed = (await t.fhir('GET', `/Subscription/${id}/$events?eventsSinceNumber=1&eventsUntilNumber=2`)).json<Json>();
    expect(eventNumbers(missed)).toEqual([1, 2]);
    await t.fhir('PUT', '/Encounter/gap-3', encounter('gap-3', patient));
    const frames = await client.framesAfter(2);
    expect(eventNumbers(frames[1]!)).toEqual([3]);
  });

  it('several clients bound to one subscription each get every event', async () => {
    const patient = 'Patient/several';
    const { id } = await createWebsocketSubscription(patient);
    const [first, second, third] = [await bound(id), await bound(id), await bound(id)];
    for (const n of [1, 2]) await t.fhir('PUT', `/Encounter/several-${n}`, encounter(`several-${n}`, patient));
    for (const client of [first, second, third]) expect((await client.framesAfter(3)).slice(1).flatMap((frame) => eventNumbers(frame))).toEqual([1, 2]);
    const { rows } = await t.database.pool.query(`SELECT response_excerpt FROM webhook.delivery_attempts WHERE subscription_id = $1 ORDER BY id`, [id]);
    expect(rows.map((row) => row.response_excerpt)).toEqual(['published to 3 bound websocket clients', 'published to 3 bound websocket clients']);
  });

  it('gets heartbeats at the subscription period when nothing else went', { timeout: 40_000 }, async () => {
    const period = 10;
    const { id } = await createWebsocketSubscription('Patient/heartbeat', {
      channelExtensions: [{ url: `${ig}/backport-heartbeat-period`, valueUnsignedInt: period }],
    });
    const client = await bound(id);
    const arrivals: number[] = [];
    for (const count of [2, 3]) {
      await client.framesAfter(count, (period + 10) * 1000);
      arrivals.push(Date.now());
    }
    for (const heartbeat of client.frames.slice(1)) {
      expect(notificationProblems(heartbeat, { subscriptionId: id, type: 'heartbeat', status: 'active', content: 'id-only' })).toEqual([]);
      expect(statusValue(heartbeat, 'events-since-subscription-start')).toBe('0');
    }
    // A period apart: each is recorded as a call, and the next is due a period after it.
    expect(arrivals[1]! - arrivals[0]!).toBeGreaterThanOrEqual(period * 1000 - 1500);
  });

  it("speaks Medplum's client: its ping is answered with a pong and the socket stays open; its unbind-from-token stops that token's frames", async () => {
    const patient = 'Patient/medplum';
    const { id } = await createWebsocketSubscription(patient);
    const medplum = await connect();
    const { token } = await bindingToken(id);
    medplum.send(JSON.stringify({ type: 'bind-with-token', payload: { token } }));
    await medplum.framesAfter(1);
    // Bound to the same subscription: it shows when an event was sent.
    const witness = await bound(id);
    const kinds = () => medplum.frames.map((frame) => (frame.resourceType === 'Bundle' ? statusValue(frame, 'type') : frame));
    const ping = JSON.stringify({ type: 'ping' });
    medplum.send(ping);
    await medplum.framesAfter(2);
    await t.fhir('PUT', '/Encounter/medplum-1', encounter('medplum-1', patient));
    await medplum.framesAfter(3);
    expect(kinds()).toEqual(['handshake', { type: 'pong' }, 'event-notification']);

    medplum.send(JSON.stringify({ type: 'unbind-from-token', payload: { token } }));
    await waitFor(async () => {
      const { rows } = await t.database.pool.query('SELECT count(*)::int AS bindings FROM webhook.websocket_bindings WHERE subscription_id = $1', [id]);
      return rows[0].bindings === 1 ? true : undefined;
    });
    await t.fhir('PUT', '/Encounter/medplum-2', encounter('medplum-2', patient));
    await witness.framesAfter(3);
    // A ping after it: its pong comes after anything the server would have sent before.
    medplum.send(ping);
    await medplum.framesAfter(4);
    expect(kinds()).toEqual(['handshake', { type: 'pong' }, 'event-notification', { type: 'pong' }]);
    expect(await Promise.race([medplum.closed, new Promise((resolve) => setTimeout(() => resolve('open'), 200))])).toBe('open');
    // A token that bound nothing here unbinds nothing, and says so.
    medplum.send(JSON.stringify({ type: 'unbind-from-token', payload: { token } }));
    expect((await medplum.framesAfter(5))[4]).toMatchObject({
      resourceType: 'OperationOutcome',
      issue: [{ severity: 'information', details: { text: 'This token bound nothing on this connection: nothing was unbound' } }],
    });
  });

  it('binds several subscriptions with one token (type level), and more with another token on the same connection', async () => {
    const [a, b, c] = [
      await createWebsocketSubscription('Patient/several-a'),
      await createWebsocketSubscription('Patient/several-b'),
      await createWebsocketSubscription('Patient/several-c'),
    ];
    const answer = (await t.fhir('GET', `/Subscription/$get-ws-binding-token?id=${a.id},${b.id}`)).json<Json>();
    const client = await connect();
    client.send(`bind-with-token ${answer.parameter[0].valueString as string}`);
    const handshakes = await client.framesAfter(2);
    expect(handshakes.map((frame) => String(statusValue(frame, 'type')))).toEqual(['handshake', 'handshake']);
    expect(handshakes.map((frame) => (statusValue(frame, 'subscription') as Json).reference).sort()).toEqual(
      [a.id, b.id].map((id) => `${t.serviceBase}/Subscription/${id}`).sort(),
    );
    client.send(`bind-with-token ${(await bindingToken(c.id)).token}`);
    await client.framesAfter(3);
    expect((statusValue(client.frames[2]!, 'subscription') as Json).reference).toBe(`${t.serviceBase}/Subscription/${c.id}`);
    for (const name of ['a', 'b', 'c']) await t.fhir('PUT', `/Encounter/several-${name}`, encounter(`several-${name}`, `Patient/several-${name}`));
    const notified = (await client.framesAfter(6)).slice(3).map((frame) => (statusValue(frame, 'subscription') as Json).reference as string);
    expect(notified.sort()).toEqual([a.id, b.id, c.id].map((id) => `${t.serviceBase}/Subscription/${id}`).sort());
  });

  it('is closed when the key that bound it is revoked', async () => {
    const { key, id: keyId } = await createApiKey(t.database.db, 'revoked while bound', ['read', 'write']);
    const { id } = (await t.fhir('POST', '/Subscription', websocketSubscription('Patient/revoked-bound'), { 'x-api-key': key })).json<Json>();
    const client = await connect();
    client.send(`bind-with-token ${(await bindingToken(id as string, { 'x-api-key': key })).token}`);
    await client.framesAfter(1);
    await t.database.pool.query('UPDATE webhook.api_keys SET revoked_at = now() WHERE id = $1', [keyId]);
    expect(await client.closed).toEqual({ code: 1008, reason: 'The API key that bound this client was revoked' });
  });

  it('is told when its subscription is switched off, and closed', async () => {
    const { id } = await createWebsocketSubscription('Patient/ended');
    const client = await bound(id);
    await t.fhir('POST', '/Subscription', { ...websocketSubscription('Patient/ended'), status: 'off' });
    expect(await client.closed).toEqual({ code: 1000, reason: `Subscription/${id} was switched off: nothing more is sent for it` });
    expect(client.frames.at(-1)).toMatchObject({
      resourceType: 'OperationOutcome',
      issue: [{ details: { text: `Subscription/${id} was switched off: nothing more is sent for it` } }],
    });
  });
});

describe('refusals: an error frame and a close, nothing else', () => {
  const refusedWith = async (message: string | Buffer, code: number, text: string) => {
    const client = await connect();
    client.send(message);
    expect(await client.closed).toMatchObject({ code });
    expect(client.frames).toHaveLength(1);
    expect(client.frames[0]).toMatchObject({
      resourceType: 'OperationOutcome',
      issue: [{ severity: 'error', details: { text: expect.stringContaining(text) } }],
    });
  };

  it('a plain GET of the endpoint is a 426 OperationOutcome saying what it is', async () => {
    const response = await fetch(`${t.baseUrl}/fhir/websocket`);
    expect(response.status).toBe(426);
    expect(((await response.json()) as Json).issue[0].details.text).toContain(
      "/fhir/websocket is the websocket channel's endpoint: connect with a websocket client",
    );
  });

  it('an unknown token, a used one, an expired one', async () => {
    const { id } = await createWebsocketSubscription('Patient/tokens');
    await refusedWith('bind-with-token fwt_nothing', 1008, 'Unknown binding token');
    const { token } = await bindingToken(id);
    const first = await connect();
    first.send(`bind-with-token ${token}`);
    await first.framesAfter(1);
    await refusedWith(`bind-with-token ${token}`, 1008, 'This binding token was used already');
    const { token: late } = await bindingToken(id);
    await t.database.pool.query(`UPDATE webhook.websocket_binding_tokens SET expires_at = now() - interval '1 second' WHERE used_at IS NULL`);
    await refusedWith(`bind-with-token ${late}`, 1008, 'This binding token has expired');
  });

  it("a token whose key was revoked, or whose subscription another key's now is not", async () => {
    const { key, id: keyId } = await createApiKey(t.database.db, 'revoked later', ['read', 'write']);
    const { id } = (await t.fhir('POST', '/Subscription', websocketSubscription('Patient/revoked'), { 'x-api-key': key })).json<Json>();
    const { token } = await bindingToken(id as string, { 'x-api-key': key });
    await t.database.pool.query('UPDATE webhook.api_keys SET revoked_at = now() WHERE id = $1', [keyId]);
    await refusedWith(`bind-with-token ${token}`, 1008, 'The API key that asked for this token was revoked');
  });

  it('a malformed message, a binary frame', async () => {
    await refusedWith('subscribe me please', 1003, 'Unknown message: send bind-with-token <token>');
    await refusedWith(Buffer.from('bind-with-token x'), 1003, 'Binary frames are not understood');
  });

  it('a message over WEBSOCKET_MAX_MESSAGE_BYTES is closed 1009', async () => {
    const client = await connect();
    client.send(`bind-with-token ${'x'.repeat(limits.maxMessageBytes)}`);
    expect(await client.closed).toMatchObject({ code: 1009 });
    expect(client.frames).toHaveLength(0);
    expect((await scrape()).get('fhir_webhooks_websocket_closes_total{reason="too-large"}')).toBeGreaterThanOrEqual(1);
  });
});

describe('across processes', () => {
  it(
    'a write committed anywhere reaches the clients bound to either of two API processes, none lost between a bind and its first notification',
    { timeout: 90_000 },
    async () => {
      const key = 'websocket-processes-key-0123456789';
      const start = async () => {
        const port = await freePort();
        const command = startCommand(process.execPath, [cliEntry, 'api'], {
          ...childEnvironment({
            DATABASE_URL: t.database.url,
            SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'),
            BOOTSTRAP_API_KEY: key,
            PORT: String(port),
            HOST: '127.0.0.1',
            BASE_URL: `http://127.0.0.1:${port}`,
            LOG_LEVEL: 'info',
          }),
        });
        await command.waitFor(/Listening on/);
        return { base: `http://127.0.0.1:${port}`, command };
      };
      const [one, two] = await Promise.all([start(), start()]);
      const api = (base: string, method: string, path: string, body?: unknown) =>
        fetch(`${base}/fhir/resources${path}`, {
          method,
          headers: { 'x-api-key': key, ...(body === undefined ? {} : { 'content-type': 'application/fhir+json' }) },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
      const patient = 'Patient/processes';
      const created = await api(one.base, 'POST', '/Subscription', websocketSubscription(patient));
      expect(created.status).toBe(201);
      const { id } = (await created.json()) as { id: string };
      /** A client of `base`'s process, bound with a token that process's API gave. */
      const bindAt = async (base: string) => {
        const answer = (await (await api(base, 'GET', `/Subscription/${id}/$get-ws-binding-token`)).json()) as Json;
        const client = await connect(answer.parameter.find((item: Json) => item.name === 'websocket-url').valueUrl as string);
        client.send(`bind-with-token ${answer.parameter.find((item: Json) => item.name === 'token').valueString as string}`);
        await client.framesAfter(1);
        return client;
      };

      // Writes through the first process's API, through the second's, and by plain SQL (a loader's), while clients bind to both.
      const total = 36;
      const writes = (async () => {
        for (let n = 1; n <= total; n += 1) {
          const resource = encounter(`processes-${n}`, patient);
          if (n % 3 === 0) await t.database.pool.query('INSERT INTO fhir.resources (content) VALUES ($1)', [resource]);
          else expect((await api(n % 3 === 1 ? one.base : two.base, 'PUT', `/Encounter/processes-${n}`, resource)).status).toBe(201);
          await new Promise((resolve) => setTimeout(resolve, 25));
        }
      })();
      const bound: Client[] = [];
      for (let index = 0; index < 6; index += 1) {
        bound.push(await bindAt(index % 2 === 0 ? one.base : two.base));
        await new Promise((resolve) => setTimeout(resolve, 90));
      }
      await writes;
      // The binds fell at different points of the stream.
      expect(new Set(bound.map((client) => statusValue(client.frames[0]!, 'events-since-subscription-start'))).size).toBeGreaterThan(1);
      for (const client of bound) {
        const after = Number(statusValue(client.frames[0]!, 'events-since-subscription-start'));
        const expected = Array.from({ length: total - after }, (_, index) => after + index + 1);
        // Every event numbered after its handshake, in order, once; those before it the handshake counted ($events has them).
        await waitFor(() => (client.frames.length - 1 >= expected.length ? true : undefined), 20_000, `events ${after + 1}..${total}`);
        expect(client.frames.slice(1).flatMap((frame) => eventNumbers(frame))).toEqual(expected);
      }
      // Each process holds its clients' rows; none is left once they close.
      const { rows } = await t.database.pool.query(
        `SELECT count(DISTINCT server_id)::int AS servers FROM webhook.websocket_bindings WHERE subscription_id = $1`,
        [id],
      );
      expect(rows[0].servers).toBe(2);
      await Promise.all(bound.map((client) => client.close()));
      await waitFor(async () => {
        const { rows: left } = await t.database.pool.query(`SELECT count(*)::int AS bindings FROM webhook.websocket_bindings WHERE subscription_id = $1`, [id]);
        return left[0].bindings === 0 ? true : undefined;
      });
      await stopStartedCommands();
    },
  );
});

/** Until the service holds no client of this app's (the closes of the test before are handled). */
const untilNoClients = () =>
  waitFor(async () => {
    const samples = await scrape();
    const open =
      (samples.get('fhir_webhooks_websocket_connections{state="bound"}') ?? 0) + (samples.get('fhir_webhooks_websocket_connections{state="unbound"}') ?? 0);
    const { rows } = await t.database.pool.query('SELECT count(*)::int AS bindings FROM webhook.websocket_bindings');
    return open === 0 && rows[0].bindings === 0 ? true : undefined;
  });

describe('limits', () => {
  it(
    'a client that never reads is cut off at its send buffer, the process holding no more; the others bound to the subscription get every event',
    { timeout: 60_000 },
    async () => {
      const patient = 'Patient/slow';
      const { id } = await createWebsocketSubscription(patient, { content: 'full-resource' });
      const reader = await bound(id);
      // A real client that stops reading: its socket is paused, so TCP's window closes and the server's writes queue.
      const slow = new WsClient(`${t.baseUrl.replace(/^http/, 'ws')}/fhir/websocket`);
      await new Promise((resolve, reject) => slow.once('open', resolve).once('error', reject));
      const slowFrames: string[] = [];
      slow.on('message', (data: Buffer) => slowFrames.push(data.toString('utf8')));
      slow.send(`bind-with-token ${(await bindingToken(id)).token}`);
      await waitFor(() => (slowFrames.length >= 1 ? true : undefined));
      slow.pause();
      const before = (await scrape()).get('fhir_webhooks_websocket_closes_total{reason="slow-client"}') ?? 0;
      // 200 kB notifications, far more than the loopback's socket buffers and the 64 KiB bound hold.
      const padding = 'x'.repeat(200_000);
      const total = 80;
      for (let n = 1; n <= total; n += 1) {
        await t.fhir(
          'PUT',
          `/Encounter/slow-${n}`,
          encounter(`slow-${n}`, patient, { extension: [{ url: 'http://example.org/padding', valueString: padding }] }),
        );
      }
      await waitFor(
        async () => ((await scrape()).get('fhir_webhooks_websocket_closes_total{reason="slow-client"}') === before + 1 ? true : undefined),
        30_000,
        'the slow client cut off',
      );
      await waitFor(async () => {
        const { rows } = await t.database.pool.query('SELECT count(*)::int AS bindings FROM webhook.websocket_bindings WHERE subscription_id = $1', [id]);
        return rows[0].bindings === 1 ? true : undefined;
      });
      const frames = await reader.framesAfter(total + 1, 30_000);
      expect(frames.slice(1).flatMap((frame) => eventNumbers(frame))).toEqual(Array.from({ length: total }, (_, index) => index + 1));
      // Once it reads again, the client finds the connection closed.
      const closed = new Promise<number>((resolve) => slow.once('close', resolve));
      slow.resume();
      expect(await closed).toBe(1006);
      expect(slowFrames.length).toBeLessThan(total + 1);
    },
  );

  it('binds at most WEBSOCKET_MAX_CONNECTIONS_PER_KEY clients of one key, and holds at most WEBSOCKET_MAX_CONNECTIONS clients', async () => {
    await untilNoClients();
    const { id } = await createWebsocketSubscription('Patient/limits');
    for (let index = 0; index < limits.maxConnectionsPerKey; index += 1) await bound(id);
    const refused = await connect();
    refused.send(`bind-with-token ${(await bindingToken(id)).token}`);
    expect(await refused.closed).toMatchObject({ code: 1008 });
    expect(refused.frames).toEqual([
      expect.objectContaining({
        resourceType: 'OperationOutcome',
        issue: [
          expect.objectContaining({
            details: { text: `This API key has ${limits.maxConnectionsPerKey} websocket clients bound, the most WEBSOCKET_MAX_CONNECTIONS_PER_KEY allows` },
          }),
        ],
      }),
    ]);
    // Another key binds still.
    const { key } = await createApiKey(t.database.db, 'another websocket client', ['read', 'write']);
    const theirs = (await t.fhir('POST', '/Subscription', websocketSubscription('Patient/limits-other'), { 'x-api-key': key })).json<Json>();
    const other = await connect();
    other.send(`bind-with-token ${(await bindingToken(theirs.id as string, { 'x-api-key': key })).token}`);
    await other.framesAfter(1);
    expect(statusValue(other.frames[0]!, 'type')).toBe('handshake');
    // The process's own limit counts every client, bound or not.
    // Open now: the key's bound clients and the other key's.
    for (let open = limits.maxConnectionsPerKey + 1; open < limits.maxConnections; open += 1) await connect();
    const full = await connect();
    expect(await full.closed).toMatchObject({ code: 1013 });
    expect(full.frames[0]).toMatchObject({ issue: [{ details: { text: expect.stringContaining('the most WEBSOCKET_MAX_CONNECTIONS allows') } }] });
  });

  it('closes a connection that binds nothing within WEBSOCKET_BIND_TIMEOUT_SECONDS, and holds at most WEBSOCKET_MAX_UNBOUND_PER_ADDRESS of them from one address', async () => {
    const strictApp = await startTestApp({ listen: true, websocket: { ...limits, bindTimeoutMs: 1_000, maxUnboundPerAddress: 3 } });
    try {
      await addTopics(strictApp.database.db, [JSON.parse(readFileSync(new URL('../../../examples/topics/encounter-complete.json', import.meta.url), 'utf8'))]);
      const url = `${strictApp.baseUrl.replace(/^http/, 'ws')}/fhir/websocket`;
      const started = performance.now();
      const [binding, ...silent] = [await connect(url), await connect(url), await connect(url)];
      const refused = await connect(url);
      expect(await refused.closed).toMatchObject({ code: 1013 });
      expect(refused.frames[0]).toMatchObject({ issue: [{ details: { text: expect.stringContaining('the most WEBSOCKET_MAX_UNBOUND_PER_ADDRESS allows') } }] });
      // One that binds is no longer counted: the address may open another.
      const { id } = await createWebsocketSubscription('Patient/unbound-limit', {}, strictApp);
      binding.send(`bind-with-token ${(await strictApp.fhir('GET', `/Subscription/${id}/$get-ws-binding-token`)).json<Json>().parameter[0].valueString}`);
      await binding.framesAfter(1);
      const another = await connect(url);
      for (const client of [...silent, another]) {
        expect(await client.closed).toEqual({ code: 1000, reason: 'Nothing bound within 1 s of connecting: send bind-with-token <token> at once' });
      }
      expect(performance.now() - started).toBeLessThan(5_000);
      expect(await Promise.race([binding.closed, new Promise((resolve) => setTimeout(() => resolve('open'), 200))])).toBe('open');
    } finally {
      await strictApp.close();
    }
  });

  it('closes a client that binds nothing, or stops answering pings, within WEBSOCKET_IDLE_TIMEOUT', { timeout: 30_000 }, async () => {
    const idleMetrics = createMetrics();
    const idleApp = await startTestApp({
      listen: true,
      websocket: { ...limits, idleTimeoutMs: 1_000 },
      outbound: { delivery: loadConfig({}).delivery, oauth: undefined, metrics: idleMetrics },
    });
    try {
      await addTopics(idleApp.database.db, [JSON.parse(readFileSync(new URL('../../../examples/topics/encounter-complete.json', import.meta.url), 'utf8'))]);
      const url = `${idleApp.baseUrl.replace(/^http/, 'ws')}/fhir/websocket`;
      const silent = await connect(url);
      expect(await silent.closed).toEqual({ code: 1000, reason: 'Nothing bound for 1 s: send bind-with-token <token> after connecting' });
      expect(silent.frames).toHaveLength(1);
      // Bound, then deaf to pings: its socket paused, it answers none.
      const { id } = await createWebsocketSubscription('Patient/deaf', {}, idleApp);
      const token = (await idleApp.fhir('GET', `/Subscription/${id}/$get-ws-binding-token`)).json<Json>().parameter[0].valueString as string;
      const deaf = new WsClient(url);
      await new Promise((resolve, reject) => deaf.once('open', resolve).once('error', reject));
      const handshake = new Promise((resolve) => deaf.once('message', resolve));
      deaf.send(`bind-with-token ${token}`);
      await handshake;
      deaf.pause();
      const idle = async () => (await idleMetrics.registry.metrics()).includes('fhir_webhooks_websocket_closes_total{reason="idle"} 2');
      await waitFor(async () => ((await idle()) ? true : undefined), 10_000, 'the deaf client closed');
      deaf.terminate();
    } finally {
      await idleApp.close();
    }
  });
});

describe('what operators see', () => {
  it("the metrics count bound clients, frames by type and closes by reason; the console lists a websocket subscription's bound clients", async () => {
    await untilNoClients();
    const patient = 'Patient/operators';
    const { id } = await createWebsocketSubscription(patient);
    const before = await scrape();
    const client = await bound(id);
    await t.fhir('PUT', '/Encounter/operators-1', encounter('operators-1', patient));
    await client.framesAfter(2);
    const during = await scrape();
    expect(during.get('fhir_webhooks_websocket_connections{state="bound"}')).toBe(1);
    expect(during.get('fhir_webhooks_websocket_frames_sent_total{type="handshake"}')).toBe(
      before.get('fhir_webhooks_websocket_frames_sent_total{type="handshake"}')! + 1,
    );
    expect(during.get('fhir_webhooks_websocket_frames_sent_total{type="event-notification"}')).toBe(
      before.get('fhir_webhooks_websocket_frames_sent_total{type="event-notification"}')! + 1,
    );

    const detail = await t.app.inject({ method: 'GET', url: `/console/api/subscriptions/${id}`, headers: { 'x-api-key': t.apiKey } });
    expect(detail.statusCode, detail.body).toBe(200);
    const { websocketClients } = detail.json<Json>();
    expect(websocketClients).toEqual([
      { connection: expect.any(String), address: '127.0.0.1', server: expect.stringMatching(/^websocket-server:/), boundAt: expect.any(String) },
    ]);
    const restHook = await t.fhir('POST', '/Subscription', {
      ...websocketSubscription('Patient/operators-rest-hook'),
      channel: {
        type: 'rest-hook',
        endpoint: 'http://127.0.0.1:9/none',
        payload: 'application/fhir+json',
        _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'empty' }] },
      },
    });
    expect(restHook.statusCode, restHook.body).toBe(201);
    expect(
      (
        await t.app.inject({ method: 'GET', url: `/console/api/subscriptions/${restHook.json<Json>().id as string}`, headers: { 'x-api-key': t.apiKey } })
      ).json<Json>().websocketClients,
    ).toBeNull();

    await client.close();
    await untilNoClients();
    const after = await scrape();
    expect(after.get('fhir_webhooks_websocket_closes_total{reason="client"}')).toBe(before.get('fhir_webhooks_websocket_closes_total{reason="client"}')! + 1);
    expect(
      (await t.app.inject({ method: 'GET', url: `/console/api/subscriptions/${id}`, headers: { 'x-api-key': t.apiKey } })).json<Json>().websocketClients,
    ).toEqual([]);
  });
});

const chromiumPath = '/usr/bin/chromium';
const chromiumInstalled = spawnSync(chromiumPath, ['--version']).status === 0;

describe.skipIf(!chromiumInstalled && process.env.CI === undefined)(
  "the console in Chromium (Debian's chromium; skipped where it is missing, outside CI)",
  () => {
    it("shows a websocket subscription's bound clients below its calls", { timeout: 60_000 }, async () => {
      await untilNoClients();
      const { id } = await createWebsocketSubscription('Patient/console');
      await bound(id);
      const browser = await chromium.launch({
        executablePath: chromiumPath,
        args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
      });
      try {
        const page = await browser.newPage();
        const errors: string[] = [];
        page.on('pageerror', (error) => errors.push(error.message));
        await page.goto(`${t.baseUrl}/console`);
        await page.fill('#key', t.apiKey);
        await page.click('button[type=submit]');
        const row = page.locator('#subscriptions tbody tr', { hasText: id });
        await expect.poll(() => row.count(), { timeout: 10_000 }).toBe(1);
        await row.click();
        const clientRows = page.locator('#websocket-clients tbody tr');
        await expect.poll(() => clientRows.count(), { timeout: 10_000 }).toBe(1);
        expect(await page.locator('#websocket').isVisible()).toBe(true);
        expect(await clientRows.nth(0).textContent()).toMatch(/127\.0\.0\.1.*websocket-server:/);
        expect(errors).toEqual([]);
      } finally {
        await browser.close();
      }
    });
  },
);

describe("a bind's order, step by step", () => {
  /** A notification of event `number`, as a sender builds it, sent through the websocket channel as a worker would. */
  const publish = async (id: string, number: number) => {
    const subject = { serviceBase: t.serviceBase, subscriptionId: id, topicUrl, payloadContent: 'id-only' as const, status: 'active' as const };
    const event = {
      eventNumber: number,
      timestamp: new Date().toISOString(),
      resourceType: 'Encounter',
      resourceId: `order-${number}`,
      versionId: 1,
      deleted: false,
    };
    const target = { id, channel: 'websocket' } as Target;
    return websocket.send({ db: t.database.db } as CallContext, target, {
      body: notificationBundle(statusParameters(subject, 'event-notification', number, [event]), subject, [event]),
      message: `Encounter/order-${number}/_history/1`,
      type: 'event-notification',
      lastEventNumber: number,
    });
  };
  /** The subscription's last number given moved on by one, as a claim's numbering moves it (here through its floor, webhook.last_event_number). */
  const number = (id: string) =>
    t.database.pool.query('UPDATE webhook.subscription_streams SET last_event_number = last_event_number + 1 WHERE subscription_id = $1', [id]);

  it('an event numbered while a bind is under way is in its handshake or on its socket, never lost', async () => {
    const { id } = await createWebsocketSubscription('Patient/order');
    // This API's websocket server is running (it starts at a first bind, registering and sweeping).
    await bound((await createWebsocketSubscription('Patient/order-first')).id);
    const client = await connect();
    // Holds the bind at its write of the bindings: the event is numbered and sent meanwhile.
    const holder = await t.database.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE webhook.websocket_bindings IN SHARE MODE');
      client.send(`bind-with-token ${(await bindingToken(id)).token}`);
      await waitFor(async () => {
        const { rows } = await t.database.pool.query(
          `SELECT count(*)::int AS waiting FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE 'insert into "webhook"."websocket_bindings"%'`,
        );
        return rows[0].waiting >= 1 ? true : undefined;
      });
      await number(id);
      // No binding is visible yet: nothing to publish, the event stays in the log.
      expect((await publish(id, 1)).responseExcerpt).toBe('no websocket client bound: the notification stays in the log ($events)');
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
    await client.framesAfter(1);
    // The handshake counts it: the client fetches it with $events.
    expect(statusValue(client.frames[0]!, 'events-since-subscription-start')).toBe('1');
    await number(id);
    expect((await publish(id, 2)).responseExcerpt).toBe('published to 1 bound websocket client');
    expect((await client.framesAfter(2)).slice(1).flatMap((frame) => eventNumbers(frame))).toEqual([2]);
  });

  it('a notification of events its handshake counted is not sent again; one after it is', async () => {
    const { id } = await createWebsocketSubscription('Patient/counted');
    await number(id);
    const client = await bound(id);
    expect(statusValue(client.frames[0]!, 'events-since-subscription-start')).toBe('1');
    // Event 1, numbered before the bind, published after it (a sender between its claim and its send).
    await publish(id, 1);
    await number(id);
    await publish(id, 2);
    await client.framesAfter(2);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(client.frames.slice(1).flatMap((frame) => eventNumbers(frame))).toEqual([2]);
  });
});
