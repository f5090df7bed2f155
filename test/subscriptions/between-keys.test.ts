import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/auth/api-keys.ts';
import { childEnvironment, cliEntry, runCommand } from '../support/commands.ts';
import type { Receiver } from '../support/receiver.ts';
import { untilStatus } from '../support/subscriptions.ts';
import { backportIg, exampleTopicUrl, startTopicStack, type TopicStack } from '../support/topics.ts';

/**
 * Two clients, each with its API key, asking for the same criteria (issue 33,
 * migration 0032): each has its own subscription, notified by a real
 * receiver; neither one's refusals, switch-offs nor supersessions touch or
 * reveal the other's. A single key keeps the specification's behaviour.
 */

let stack: TopicStack;
const keys: Record<'alice' | 'bob' | 'admin', string> = { alice: '', bob: '', admin: '' };
let alicesReceiver: Receiver;
let bobsReceiver: Receiver;

beforeAll(async () => {
  stack = await startTopicStack({ DELIVERY_MAX_FAILURES: '1' });
  keys.alice = (await createApiKey(stack.t.database.db, 'alice', ['read', 'write'])).key;
  keys.bob = (await createApiKey(stack.t.database.db, 'browser-app', ['read', 'write'])).key;
  keys.admin = stack.t.apiKey;
  alicesReceiver = await stack.receiver();
  bobsReceiver = await stack.receiver();
}, 60_000);
afterAll(() => stack?.close());

type Who = keyof typeof keys;
const as = (who: Who, method: 'GET' | 'POST', path: string, body?: unknown) => stack.t.fhir(method, path, body, { 'x-api-key': keys[who] });

const restHook = (criteria: string, endpoint: string, status = 'requested') => ({
  resourceType: 'Subscription',
  status,
  criteria,
  reason: 'test',
  channel: { type: 'rest-hook', endpoint, payload: 'application/fhir+json', header: [`secret: secret-of-${endpoint}`] },
});

async function subscribeAs(who: Who, criteria: string, endpoint: string): Promise<string> {
  const created = await as(who, 'POST', '/Subscription', restHook(criteria, endpoint));
  expect(created.statusCode, created.body).toBe(201);
  const { id } = created.json<{ id: string }>();
  await untilStatus(stack.t, id, 'active');
  return id;
}

/** A Patient whose family is `family`: a write that notifies `Patient?family=<family>`. */
const writePatient = (family: string) => stack.t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family }] });

const notificationsTo = (receiver: Receiver) => receiver.calls.filter((call) => call.json.resourceType === 'Patient');

describe('the same criteria for two keys', () => {
  let alices: string;
  let bobs: string;

  beforeAll(async () => {
    alices = await subscribeAs('alice', 'Patient?family=Shared', alicesReceiver.url);
    bobs = await subscribeAs('bob', 'Patient?family=Shared', bobsReceiver.url);
  });

  it('each key has its own live subscription, and each is notified', async () => {
    expect(bobs).not.toBe(alices);
    await writePatient('Shared');
    await alicesReceiver.waitForCalls(2);
    await bobsReceiver.waitForCalls(2);
    expect(notificationsTo(alicesReceiver)).toHaveLength(1);
    expect(notificationsTo(bobsReceiver)).toHaveLength(1);
  });

  it("a key's second one is refused, naming only its own", async () => {
    const refused = await as('bob', 'POST', '/Subscription', restHook('Patient?family=Shared', 'http://127.0.0.1:9/elsewhere'));
    expect(refused.statusCode).toBe(400);
    expect(refused.json().issue[0].details.text).toBe(
      "ValidationError: ['This API key already has a live (requested or active) subscription for criteria=Patient?family=Shared (constraint subscriptions_one_live_per_key_and_criteria): switch it off first']",
    );
    expect(refused.body).not.toContain(alices);
    expect(refused.body).not.toContain(alicesReceiver.url);
  });

  it("neither sees the other's in a search by that criteria", async () => {
    const found = await as('bob', 'GET', `/Subscription?criteria=${encodeURIComponent('Patient?family=Shared')}`);
    expect(found.json().entry.map((entry: { resource: { id: string } }) => entry.resource.id)).toEqual([bobs]);
    expect(found.body).not.toContain(alices);
  });

  it("a key's switch-off ends its own only: the other's is still notified", async () => {
    const off = await as('bob', 'POST', '/Subscription', restHook('Patient?family=Shared', bobsReceiver.url, 'off'));
    expect(off.statusCode).toBe(200);
    expect(off.json()).toMatchObject({ id: bobs, status: 'off' });
    await untilStatus(stack.t, alices, 'active');
    await writePatient('Shared');
    await alicesReceiver.waitForCalls(3);
    expect(notificationsTo(alicesReceiver)).toHaveLength(2);
    expect(notificationsTo(bobsReceiver)).toHaveLength(1);
    // Switched off, its criteria is free for the key again; the other's refusal is its own to see.
    const again = await as('bob', 'POST', '/Subscription', restHook('Patient?family=Shared', 'http://127.0.0.1:9/hook', 'off'));
    expect(again.statusCode).toBe(400);
    expect(again.json().issue[0].details.text).toBe("ValidationError: ['Not found webhook active or requested for criteria=Patient?family=Shared']");
  });

  it("an admin key's switch-off by criteria ends the admin key's own, not a client's", async () => {
    const admins = await subscribeAs('admin', 'Patient?family=Shared', (await stack.receiver()).url);
    const off = await as('admin', 'POST', '/Subscription', restHook('Patient?family=Shared', 'http://127.0.0.1:9/hook', 'off'));
    expect(off.json()).toMatchObject({ id: admins, status: 'off' });
    await untilStatus(stack.t, alices, 'active');
    // An admin still sees every client's.
    expect((await as('admin', 'GET', `/Subscription/${alices}`)).statusCode).toBe(200);
  });

  it("an operator switches a client's off by its id (subscriptions switch-off)", async () => {
    const environment = childEnvironment({ DATABASE_URL: stack.t.database.url, LOG_LEVEL: 'warn' });
    const run = await runCommand(process.execPath, [cliEntry, 'subscriptions', 'switch-off', alices], environment);
    expect(run.output).toBe(`Switched subscription ${alices} off (it was active).\n`);
    expect(run.exitCode).toBe(0);
    const read = (await as('alice', 'GET', `/Subscription/${alices}`)).json().resource;
    expect(read).toMatchObject({ status: 'off', end: expect.any(String) });
    expect((await runCommand(process.execPath, [cliEntry, 'subscriptions', 'switch-off', alices], environment)).output).toBe(
      `Subscription ${alices} was off already.\n`,
    );
    const unknown = await runCommand(process.execPath, [cliEntry, 'subscriptions', 'switch-off', '00000000-0000-4000-8000-000000000000'], environment);
    expect(unknown.exitCode).toBe(1);
  });
});

describe('supersession is per key', () => {
  it("another key's new subscription does not supersede one in error: the next event reactivates it", async () => {
    const failing = await stack.receiver();
    const alices = await subscribeAs('alice', 'Patient?family=Flaky', failing.url);
    failing.answer = () => ({ status: 503 });
    await writePatient('Flaky');
    await untilStatus(stack.t, alices, 'error');
    // Bob asks for the same criteria while alice's is in error: his is his own.
    const bobs = await subscribeAs('bob', 'Patient?family=Flaky', bobsReceiver.url);
    failing.answer = () => ({ status: 200 });
    const before = failing.calls.length;
    await writePatient('Flaky');
    await untilStatus(stack.t, alices, 'active');
    // The reactivation handshake, then that event.
    await failing.waitForCalls(before + 2);
    expect(failing.calls.at(-1)!.json.resourceType).toBe('Patient');
    expect((await as('bob', 'GET', `/Subscription/${bobs}`)).json().resource.status).toBe('active');
  });

  it('a newer one of the same key still supersedes it (the specification)', async () => {
    const failing = await stack.receiver();
    failing.answer = (call) => ({ status: call.json.resourceType === 'Bundle' ? 200 : 503 });
    const first = await subscribeAs('alice', 'Patient?family=Replaced', failing.url);
    await writePatient('Replaced');
    await untilStatus(stack.t, first, 'error');
    const second = await subscribeAs('alice', 'Patient?family=Replaced', alicesReceiver.url);
    const { rows } = await stack.t.database.pool.query(
      'SELECT webhook.subscription_is_superseded($1) AS first, webhook.subscription_is_superseded($2) AS second',
      [first, second],
    );
    expect(rows[0]).toEqual({ first: true, second: false });
  });
});

describe('a topic-based websocket subscription for two keys', () => {
  // docs/topics.md's websocket subscription, as the issue's second client sent it.
  const websocket = {
    resourceType: 'Subscription',
    status: 'requested',
    reason: 'Finished encounters, to the ward board',
    criteria: exampleTopicUrl,
    channel: {
      type: 'websocket',
      payload: 'application/fhir+json',
      _payload: { extension: [{ url: `${backportIg}/backport-payload-content`, valueCode: 'id-only' }] },
    },
  };

  it("a second client's is created, not refused for the first's", async () => {
    const admins = await as('admin', 'POST', '/Subscription', websocket);
    expect(admins.statusCode, admins.body).toBe(201);
    const bobs = await as('bob', 'POST', '/Subscription', websocket);
    expect(bobs.statusCode, bobs.body).toBe(201);
    expect(bobs.body).not.toContain(admins.json().id);
  });
});

describe('keys made without naming scopes', () => {
  it("are a client's (read, write), in code and in the table alike", async () => {
    const made = await createApiKey(stack.t.database.db, 'made by code');
    const { rows } = await stack.t.database.pool.query(
      `WITH inserted AS (INSERT INTO webhook.api_keys (name, key_sha256) VALUES ('inserted by SQL', repeat('a', 64)) RETURNING scopes)
       SELECT (SELECT scopes FROM webhook.api_keys WHERE id = $1) AS by_code, (SELECT scopes FROM inserted) AS by_sql`,
      [made.id],
    );
    expect(rows[0]).toEqual({ by_code: ['read', 'write'], by_sql: ['read', 'write'] });
  });

  it("an old key holding admin becomes a client's with api-key set-scopes, keeping its own subscriptions", async () => {
    const old = await createApiKey(stack.t.database.db, 'made before scopes', ['read', 'write', 'admin']);
    const mine = (await stack.t.fhir('POST', '/Subscription', restHook('Patient?family=Old', 'http://127.0.0.1:9/hook'), { 'x-api-key': old.key })).json().id;
    const search = async () =>
      (await stack.t.fhir('GET', '/Subscription?_count=1000', undefined, { 'x-api-key': old.key }))
        .json()
        .entry.map((entry: { resource: { id: string } }) => entry.resource.id);
    expect((await search()).length).toBeGreaterThan(1);
    const environment = childEnvironment({ DATABASE_URL: stack.t.database.url, LOG_LEVEL: 'warn' });
    const run = await runCommand(process.execPath, [cliEntry, 'api-key', 'set-scopes', old.id, 'read,write'], environment);
    expect(run.output).toBe(`API key ${old.id} now has the scopes read, write.\n`);
    expect(await search()).toEqual([mine]);
    const wrong = await runCommand(process.execPath, [cliEntry, 'api-key', 'set-scopes', old.id, 'read,root'], environment);
    expect(wrong.exitCode).toBe(2);
    expect(wrong.output).toContain('Unknown scope root');
  });
});
