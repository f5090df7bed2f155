import { createHmac, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { verify } from '@octokit/webhooks-methods';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/auth/api-keys.ts';
import { loadConfig } from '../../src/config/index.ts';
import { createLogger } from '../../src/config/logger.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { formatInstant, isStoredInstant } from '../../src/fhir/instant.ts';
import { createSecretBox } from '../../src/subscriptions/secrets.ts';
import { addTopics } from '../../src/topics/store.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { eventNumbers, type Json } from '../support/backport-conformance.ts';
import { childEnvironment, cliEntry, runCommand } from '../support/commands.ts';
import { startReceiver, waitFor, type ReceivedCall, type Receiver } from '../support/receiver.ts';
import { subscribe, untilStatus } from '../support/subscriptions.ts';

/**
 * Rotating a subscription's signing secret without a gap (issue 28): through
 * the API ($rotate-secret) and the CLI (subscriptions rotate-secret), against
 * real receivers on loopback that verify every call as docs/receivers.md says
 * with the secrets they hold, switching from the old secret to the new one
 * within the overlap: no call refused, no event lost, and no secret in an
 * answer, a record or a log line.
 */

// The default overlap is short here; Standard Webhooks signatures on, so that both kinds are checked.
const config = loadConfig({
  BASE_URL: baseUrl,
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
  WEBHOOK_STANDARD_SIGNATURES: 'true',
  DELIVERY_RETRY_DELAYS_MS: '1000',
  SECRET_ROTATION_OVERLAP_SECONDS: '4',
});

/** Every secret this file uses: none may be in an answer, a record or a log line. */
const usedSecrets = new Set<string>();
const secretNamed = (name: string) => {
  const secret = `${name}-${Math.random().toString(36).slice(2)}`;
  usedSecrets.add(secret);
  return secret;
};

/** What the API and the workers log, at trace level, through the service's own logger. */
const logLines: string[] = [];
const logger = createLogger('trace', { write: (line: string) => void logLines.push(line) });

let t: TestApp;
let workers: Workers;
const receivers: Receiver[] = [];

beforeAll(async () => {
  t = await startTestApp({ outbound: { delivery: config.delivery, oauth: undefined, metrics: createMetrics() }, logger });
  workers = await startWorkers(config, t.database, testSecretsKey, logger);
  await addTopics(t.database.db, [JSON.parse(readFileSync(new URL('../../examples/topics/encounter-complete.json', import.meta.url), 'utf8'))]);
});
afterAll(async () => {
  await workers?.stop();
  await Promise.all(receivers.map((receiver) => receiver.close()));
  await t?.close();
});

const rotate = (id: string, parameter: Json[], headers: Record<string, string> = {}, query = '') =>
  t.fhir('POST', `/Subscription/${id}/$rotate-secret${query}`, { resourceType: 'Parameters', parameter }, headers);
const rotateTo = (id: string, secret: string, overlapSeconds?: number, headers: Record<string, string> = {}) =>
  rotate(
    id,
    [{ name: 'secret', valueString: secret }, ...(overlapSeconds === undefined ? [] : [{ name: 'overlapSeconds', valueUnsignedInt: overlapSeconds }])],
    headers,
  );
const instantOf = (answer: Json, name: string) => new Date(answer.parameter.find((item: Json) => item.name === name).valueInstant as string);
const untilPassed = (instant: Date) => new Promise((resolve) => setTimeout(resolve, Math.max(0, instant.getTime() - Date.now()) + 100));

/** docs/receivers.md's check: X-Hub-Signature or X-Hub-Signature-Next is the HMAC of the raw body under a secret the receiver holds. */
function hubSignatureVerifies(call: ReceivedCall, secrets: readonly string[]): boolean {
  const received = [call.headers['x-hub-signature'], call.headers['x-hub-signature-next']].map((header) => Buffer.from(String(header ?? '')));
  return secrets.some((secret) => {
    const expected = Buffer.from(`sha256=${createHmac('sha256', secret).update(call.body).digest('hex')}`);
    return received.some((header) => header.length === expected.length && timingSafeEqual(header, expected));
  });
}

/** The Standard Webhooks check, with the official library, under one of the secrets held. */
function standardSignatureVerifies(call: ReceivedCall, secrets: readonly string[]): boolean {
  const headers = Object.fromEntries(Object.entries(call.headers).map(([name, value]) => [name, String(value)]));
  return secrets.some((secret) => {
    try {
      new Webhook(secret, { format: 'raw' }).verify(call.body.toString('utf8'), headers);
      return true;
    } catch {
      return false;
    }
  });
}

/**
 * A receiver as docs/receivers.md has it: it verifies both signatures of
 * every call with the secrets it holds now (`holding`, changed as its owner
 * deploys), answers 401 to a call that fails either, and `failing` answers
 * 503 (a receiver down for a while).
 */
async function verifyingReceiver(
  holding: string[],
): Promise<{ endpoint: Receiver; holding: string[]; refused: ReceivedCall[]; failing: (call: ReceivedCall) => boolean }> {
  const endpoint = await startReceiver();
  receivers.push(endpoint);
  const scene = { endpoint, holding, refused: [] as ReceivedCall[], failing: (_call: ReceivedCall) => false };
  endpoint.answer = (call) => {
    if (!hubSignatureVerifies(call, scene.holding) || !standardSignatureVerifies(call, scene.holding)) {
      scene.refused.push(call);
      return { status: 401 };
    }
    return { status: scene.failing(call) ? 503 : 200 };
  };
  return scene;
}

/** A call as signed outside an overlap: one X-Hub-Signature and one Standard Webhooks signature, under `secret` alone. */
async function expectSignedWithOnly(call: ReceivedCall, secret: string, not: string) {
  expect(call.headers['x-hub-signature-next']).toBeUndefined();
  expect(String(call.headers['webhook-signature']).split(' ')).toHaveLength(1);
  expect(await verify(secret, call.body.toString('utf8'), String(call.headers['x-hub-signature']))).toBe(true);
  expect(hubSignatureVerifies(call, [not])).toBe(false);
  expect(standardSignatureVerifies(call, [secret])).toBe(true);
  expect(standardSignatureVerifies(call, [not])).toBe(false);
}

/** A call of an overlap: X-Hub-Signature under the previous secret, X-Hub-Signature-Next and webhook-signature under both. */
async function expectSignedWithBoth(call: ReceivedCall, previous: string, current: string) {
  expect(await verify(previous, call.body.toString('utf8'), String(call.headers['x-hub-signature']))).toBe(true);
  expect(await verify(current, call.body.toString('utf8'), String(call.headers['x-hub-signature-next']))).toBe(true);
  expect(String(call.headers['webhook-signature']).split(' ')).toHaveLength(2);
  // A receiver holding either secret alone, or both, accepts it.
  for (const holding of [[previous], [current], [previous, current]]) {
    expect(hubSignatureVerifies(call, holding)).toBe(true);
    expect(standardSignatureVerifies(call, holding)).toBe(true);
  }
  expect(hubSignatureVerifies(call, ['another-secret'])).toBe(false);
  expect(standardSignatureVerifies(call, ['another-secret'])).toBe(false);
}

const patient = async (family: string) => (await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family }] })).json<{ id: string }>();
/** The (first) call that brought `resourceId`. */
const delivered = (scene: { endpoint: Receiver }, resourceId: string) =>
  waitFor(() => scene.endpoint.calls.find((call) => call.json.id === resourceId), 10_000, `the call for ${resourceId}`);
const rotationsOf = async (id: string) =>
  (
    await t.database.pool.query<{ rotated_at: Date; rotated_by_api_key: string | null; rotated_by_operator: string | null; previous_secret_until: Date }>(
      'SELECT rotated_at, rotated_by_api_key, rotated_by_operator, previous_secret_until FROM webhook.secret_rotations WHERE subscription_id = $1 ORDER BY id',
      [id],
    )
  ).rows;
const storedSecretOf = async (id: string) =>
  createSecretBox(testSecretsKey).open(
    (await t.database.pool.query('SELECT signing_secret_encrypted FROM webhook.subscriptions WHERE id = $1', [id])).rows[0].signing_secret_encrypted,
  );

describe('POST /Subscription/{id}/$rotate-secret', () => {
  it('a classic subscription: signed with the old secret, then during the overlap with both, then with the new one only; the receiver switching within it refuses no call, and every event arrives', async () => {
    const [oldSecret, newSecret] = [secretNamed('classic-old'), secretNamed('classic-new')];
    const scene = await verifyingReceiver([oldSecret]);
    const { id } = await subscribe(t, 'Patient?family=Rotated', scene.endpoint.url, { header: [`secret: ${oldSecret}`, 'X-Tenant: north'] });
    await untilStatus(t, id, 'active');
    const before = await patient('Rotated');
    await expectSignedWithOnly(await delivered(scene, before.id), oldSecret, newSecret);

    const answer = await rotateTo(id, newSecret, 5);
    expect(answer.statusCode, answer.body).toBe(200);
    expect(answer.headers['content-type']).toContain('application/fhir+json');
    expect(answer.body).not.toContain(newSecret);
    expect(answer.body).not.toContain(oldSecret);
    const rotation = answer.json<Json>();
    expect(rotation).toEqual({
      resourceType: 'Parameters',
      parameter: [
        { name: 'subscription', valueReference: { reference: `Subscription/${id}` } },
        { name: 'rotatedAt', valueInstant: expect.any(String) },
        { name: 'previousSecretUntil', valueInstant: expect.any(String) },
      ],
    });
    const until = instantOf(rotation, 'previousSecretUntil');
    expect(until.getTime() - instantOf(rotation, 'rotatedAt').getTime()).toBe(5_000);

    // In the overlap: the receiver still holds the old secret only, then its owner deploys the new one alone.
    const whileOld = await patient('Rotated');
    const first = await delivered(scene, whileOld.id);
    scene.holding = [newSecret];
    const whileNew = await patient('Rotated');
    const second = await delivered(scene, whileNew.id);
    expect(Date.now()).toBeLessThan(until.getTime());
    for (const call of [first, second]) {
      await expectSignedWithBoth(call, oldSecret, newSecret);
      // The secret header is the subscription's new secret; the other headers are as they were.
      expect(call.headers.secret).toBe(newSecret);
      expect(call.headers['x-tenant']).toBe('north');
    }

    // After the overlap: the new secret alone.
    await untilPassed(until);
    const after = await patient('Rotated');
    await expectSignedWithOnly(await delivered(scene, after.id), newSecret, oldSecret);

    // No call refused, every event delivered once; the read shows the new secret header, as the specification has a client's secret.
    expect(scene.refused).toEqual([]);
    expect(scene.endpoint.calls.filter((call) => call.json.resourceType === 'Patient').map((call) => call.json.id)).toEqual([
      before.id,
      whileOld.id,
      whileNew.id,
      after.id,
    ]);
    const read = (await t.fhir('GET', `/Subscription/${id}`)).json<Json>().resource;
    expect(read.channel.header).toEqual([`secret: ${newSecret}`, 'X-Tenant: north']);
    expect(read.meta.versionId).not.toBe('1');
  });

  it('a retry after a rotation is signed with the secrets of its own sending, its body the same bytes; a refused call of the overlap is retried, never lost', async () => {
    const [oldSecret, newSecret] = [secretNamed('retry-old'), secretNamed('retry-new')];
    const scene = await verifyingReceiver([oldSecret]);
    const { id } = await subscribe(t, 'Patient?family=Retried', scene.endpoint.url, { header: [`secret: ${oldSecret}`] });
    await untilStatus(t, id, 'active');
    // The receiver is down for the event's first attempt; the secret is rotated before its retry (in a second).
    scene.failing = (call) => call.json.resourceType === 'Patient' && scene.endpoint.calls.filter((each) => each.json.id === call.json.id).length === 1;
    const event = await patient('Retried');
    const firstTry = await delivered(scene, event.id);
    const answer = await rotateTo(id, newSecret);
    expect(answer.statusCode, answer.body).toBe(200);
    // The overlap of SECRET_ROTATION_OVERLAP_SECONDS (4 here).
    expect(instantOf(answer.json(), 'previousSecretUntil').getTime() - instantOf(answer.json(), 'rotatedAt').getTime()).toBe(4_000);
    await expectSignedWithOnly(firstTry, oldSecret, newSecret);
    const retry = await waitFor(() => scene.endpoint.calls.filter((call) => call.json.id === event.id)[1], 10_000, 'the retry');
    expect(retry.body.equals(firstTry.body)).toBe(true);
    expect(retry.headers['webhook-id']).toBe(firstTry.headers['webhook-id']);
    await expectSignedWithBoth(retry, oldSecret, newSecret);
    expect(scene.refused).toEqual([]);
    await waitFor(async () => {
      const { rows } = await t.database.pool.query(`SELECT status FROM webhook.subscription_events WHERE subscription_id = $1 AND resource_id = $2`, [
        id,
        event.id,
      ]);
      return rows[0]?.status === 'delivered' ? true : undefined;
    });
  });

  it('a topic-based subscription: its notifications likewise, no event number missed; an event resent after the overlap is signed with the new secret only, with its webhook-id', async () => {
    const ig = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';
    const [oldSecret, newSecret] = [secretNamed('topic-old'), secretNamed('topic-new')];
    const scene = await verifyingReceiver([oldSecret]);
    const created = await t.fhir('POST', '/Subscription', {
      resourceType: 'Subscription',
      status: 'requested',
      reason: 'Encounters that became finished',
      criteria: 'http://example.org/topics/encounter-complete',
      _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: 'Encounter?patient=Patient/rotation' }] },
      channel: {
        type: 'rest-hook',
        endpoint: scene.endpoint.url,
        payload: 'application/fhir+json',
        _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'id-only' }] },
        header: [`secret: ${oldSecret}`],
      },
    });
    expect(created.statusCode, created.body).toBe(201);
    const { id } = created.json<{ id: string }>();
    await untilStatus(t, id, 'active');
    const finished = (encounter: string) =>
      t.fhir('PUT', `/Encounter/${encounter}`, {
        resourceType: 'Encounter',
        id: encounter,
        status: 'finished',
        class: { code: 'AMB' },
        subject: { reference: 'Patient/rotation' },
      });
    const notifications = () => scene.endpoint.calls.filter((call) => eventNumbers(call.json).length > 0);

    await finished('rotation-1');
    const [one] = await waitFor(() => (notifications().length === 1 ? notifications() : undefined));
    await expectSignedWithOnly(one!, oldSecret, newSecret);

    const answer = await rotateTo(id, newSecret, 3);
    expect(answer.statusCode, answer.body).toBe(200);
    const until = instantOf(answer.json(), 'previousSecretUntil');
    await finished('rotation-2');
    scene.holding = [oldSecret, newSecret];
    await finished('rotation-3');
    const overlap = await waitFor(() => (notifications().length === 3 ? notifications().slice(1) : undefined));
    for (const call of overlap) await expectSignedWithBoth(call, oldSecret, newSecret);

    await untilPassed(until);
    scene.holding = [newSecret];
    await finished('rotation-4');
    const last = await waitFor(() => notifications()[3]);
    await expectSignedWithOnly(last, newSecret, oldSecret);
    expect(notifications().flatMap((call) => eventNumbers(call.json))).toEqual([1, 2, 3, 4]);

    // Event 1, sent under the old secret, resent: the same event (its webhook-id), signed as calls are now.
    const resent = await t.fhir('POST', `/Subscription/${id}/$resend`, { resourceType: 'Parameters', parameter: [{ name: 'eventNumber', valueString: '1' }] });
    expect(resent.statusCode, resent.body).toBe(200);
    const again = await waitFor(() => notifications()[4]);
    expect(eventNumbers(again.json)).toEqual([1]);
    expect(again.headers['webhook-id']).toBe(one!.headers['webhook-id']);
    await expectSignedWithOnly(again, newSecret, oldSecret);
    expect(scene.refused).toEqual([]);
  });

  it("without an overlap (overlapSeconds 0) the new secret alone signs at once; a generated secret is replaced by the caller's, which becomes its secret header", async () => {
    const scene = await verifyingReceiver([]);
    // No secret header: the service generated one, which nobody knows, so the receiver takes every call until it has one.
    scene.endpoint.answer = () => ({ status: 200 });
    const { id } = await subscribe(t, 'Patient?family=Adopted', scene.endpoint.url, { header: ['X-Tenant: south'] });
    await untilStatus(t, id, 'active');
    const chosen = secretNamed('adopted');
    const answer = await rotate(id, [
      { name: 'overlapSeconds', valueInteger: 0 },
      { name: 'secret', valueString: chosen },
    ]);
    expect(answer.statusCode, answer.body).toBe(200);
    expect(instantOf(answer.json(), 'previousSecretUntil')).toEqual(instantOf(answer.json(), 'rotatedAt'));
    const event = await patient('Adopted');
    const call = await delivered(scene, event.id);
    expect(call.headers['x-hub-signature-next']).toBeUndefined();
    expect(hubSignatureVerifies(call, [chosen])).toBe(true);
    expect(standardSignatureVerifies(call, [chosen])).toBe(true);
    expect(call.headers.secret).toBe(chosen);
    expect((await t.fhir('GET', `/Subscription/${id}`)).json<Json>().resource.channel.header).toEqual(['X-Tenant: south', `secret: ${chosen}`]);
    const { rows } = await t.database.pool.query(
      'SELECT secret_is_generated, previous_signing_secret_encrypted, previous_secret_until FROM webhook.subscriptions WHERE id = $1',
      [id],
    );
    expect(rows[0]).toEqual({ secret_is_generated: false, previous_signing_secret_encrypted: null, previous_secret_until: null });
  });

  it("refuses a subscription that is off, one in a rotation's overlap (until it ends), another key's (404) and a read-only key (403): nothing changed", async () => {
    const oldSecret = secretNamed('refused-old');
    const endpoint = await startReceiver();
    receivers.push(endpoint);
    const owner = await createApiKey(t.database.db, 'rotation owner', ['read', 'write']);
    const other = (await createApiKey(t.database.db, 'another client', ['read', 'write'])).key;
    const reader = (await createApiKey(t.database.db, 'reader', ['read', 'admin'])).key;
    const asOwner = { 'x-api-key': owner.key };
    const created = await t.fhir(
      'POST',
      '/Subscription',
      {
        resourceType: 'Subscription',
        status: 'requested',
        criteria: 'Patient?family=Refused',
        reason: 'test',
        channel: { type: 'rest-hook', endpoint: endpoint.url, header: [`secret: ${oldSecret}`] },
      },
      asOwner,
    );
    const { id } = created.json<{ id: string }>();
    await untilStatus(t, id, 'active');

    const attempt = secretNamed('refused-attempt');
    const notTheirs = await rotateTo(id, attempt, 1, { 'x-api-key': other });
    expect(notTheirs.statusCode).toBe(404);
    expect(notTheirs.json().issue[0]).toMatchObject({ code: 'not-found', details: { text: `Subscription/${id} is not known` } });
    const readOnly = await rotateTo(id, attempt, 1, { 'x-api-key': reader });
    expect(readOnly.statusCode).toBe(403);
    expect(readOnly.json().issue[0].details.text).toContain('lacks the write scope');
    for (const unknown of ['00000000-0000-4000-8000-000000000000', 'not-an-id']) {
      const response = await rotateTo(unknown, attempt, 1);
      expect(response.statusCode).toBe(404);
      expect(response.json().issue[0].details.text).toBe(`Subscription/${unknown} is not known`);
    }
    const byGet = await t.fhir('GET', `/Subscription/${id}/$rotate-secret`);
    expect(byGet.statusCode).toBe(405);
    expect(await storedSecretOf(id)).toBe(oldSecret);
    expect(await rotationsOf(id)).toEqual([]);

    // The owner rotates; a second rotation within the overlap is refused until it ends.
    const first = await rotateTo(id, secretNamed('refused-first'), 1, asOwner);
    expect(first.statusCode, first.body).toBe(200);
    const until = instantOf(first.json(), 'previousSecretUntil');
    // The answer and the refusal write the instant one way: the FHIR instant the rest of the API writes (fhir.format_instant).
    const untilText = first.json().parameter.find((item: Json) => item.name === 'previousSecretUntil').valueInstant as string;
    expect(isStoredInstant(untilText)).toBe(true);
    expect(isStoredInstant(first.json().parameter.find((item: Json) => item.name === 'rotatedAt').valueInstant as string)).toBe(true);
    const tooSoon = await rotateTo(id, attempt, 1, asOwner);
    expect(tooSoon.statusCode).toBe(409);
    expect(tooSoon.json().issue[0]).toMatchObject({
      code: 'conflict',
      details: {
        text: expect.stringMatching(
          new RegExp(
            `^Subscription/${id} is in the overlap of its last rotation until ${untilText}: its receiver may still hold only the secret before it\\. Rotate again once it has ended$`,
          ),
        ),
      },
    });
    await untilPassed(until);
    const second = await rotateTo(id, attempt, 1, asOwner);
    expect(second.statusCode, second.body).toBe(200);
    expect(await storedSecretOf(id)).toBe(attempt);
    const rotations = await rotationsOf(id);
    expect(rotations.map((row) => row.rotated_by_api_key)).toEqual([owner.id, owner.id]);

    // Switched off: nothing to rotate.
    await untilPassed(instantOf(second.json(), 'previousSecretUntil'));
    await t.fhir('POST', '/Subscription', { resourceType: 'Subscription', status: 'off', criteria: 'Patient?family=Refused' }, asOwner);
    const off = await rotateTo(id, secretNamed('refused-off'), 1, asOwner);
    expect(off.statusCode).toBe(409);
    expect(off.json().issue[0].details.text).toBe(`Subscription/${id} is off: a subscription switched off is never called again, and has no secret to rotate`);
    expect(await storedSecretOf(id)).toBe(attempt);
    expect(await rotationsOf(id)).toHaveLength(2);
  });

  it("refuses a body without one good secret or with a wrong overlap, and parameters in the URL, in the spec's refusal format, never naming the secret", async () => {
    const current = secretNamed('validated-current');
    const endpoint = await startReceiver();
    receivers.push(endpoint);
    const { id } = await subscribe(t, 'Patient?family=Validated', endpoint.url, { header: [`secret: ${current}`] });
    const good = secretNamed('validated-good');
    const refusal = (text: string) => ({
      resourceType: 'OperationOutcome',
      issue: [{ severity: 'error', code: 'exception', details: { text: `ValidationError: ['${text}']` } }],
    });
    const shape = '$rotate-secret takes a Parameters with secret (valueString) and optionally overlapSeconds (valueUnsignedInt)';
    const cases: [string, unknown, string][] = [
      ['no body', undefined, '$rotate-secret takes a Parameters body with the new secret (valueString): none was sent'],
      ['not a Parameters', { resourceType: 'Basic' }, `${shape}: Invalid input: expected "Parameters"`],
      ['no secret', { resourceType: 'Parameters', parameter: [{ name: 'overlapSeconds', valueUnsignedInt: 5 }] }, `${shape}: give the new secret once`],
      [
        'two secrets',
        {
          resourceType: 'Parameters',
          parameter: [
            { name: 'secret', valueString: good },
            { name: 'secret', valueString: `${good}-2` },
          ],
        },
        `${shape}: give the new secret once`,
      ],
      [
        'an unknown parameter',
        {
          resourceType: 'Parameters',
          parameter: [
            { name: 'secret', valueString: good },
            { name: 'reason', valueString: 'leak' },
          ],
        },
        `${shape}: Invalid input`,
      ],
      ['a secret not a string', { resourceType: 'Parameters', parameter: [{ name: 'secret', valueInteger: 42 }] }, `${shape}: Invalid input`],
      ['an empty secret', { resourceType: 'Parameters', parameter: [{ name: 'secret', valueString: '' }] }, 'The new secret is empty'],
      [
        'white space around',
        { resourceType: 'Parameters', parameter: [{ name: 'secret', valueString: ` ${good} ` }] },
        'The new secret begins or ends with white space, which the secret header would lose',
      ],
      [
        'a line break',
        { resourceType: 'Parameters', parameter: [{ name: 'secret', valueString: `${good}\nInjected: 1` }] },
        'The new secret has characters HTTP cannot carry (control characters, or characters beyond Latin-1)',
      ],
      [
        'too long',
        { resourceType: 'Parameters', parameter: [{ name: 'secret', valueString: `${good}${'x'.repeat(4088)}` }] },
        'The new secret is longer than 4088 characters',
      ],
      [
        'the current one',
        { resourceType: 'Parameters', parameter: [{ name: 'secret', valueString: current }] },
        'The new secret is the current one: give another',
      ],
      ...[-1, 1.5, 2_592_001].map((overlap): [string, unknown, string] => [
        `overlapSeconds ${overlap}`,
        {
          resourceType: 'Parameters',
          parameter: [
            { name: 'secret', valueString: good },
            { name: 'overlapSeconds', valueInteger: overlap },
          ],
        },
        'overlapSeconds must be a whole number of seconds from 0 to 2,592,000 (30 days)',
      ]),
    ];
    for (const [what, body, text] of cases) {
      const response = await t.fhir('POST', `/Subscription/${id}/$rotate-secret`, body);
      expect(response.statusCode, what).toBe(400);
      expect(response.json(), what).toEqual(refusal(text));
      for (const secret of [good, current]) expect(response.body, what).not.toContain(secret);
    }
    // A secret in the URL is in the access log before any route sees it: refused, so that the client learns to treat it as leaked.
    const inUrl = await rotate(id, [{ name: 'secret', valueString: good }], {}, '?secret=sent-in-the-url');
    expect(inUrl.statusCode).toBe(400);
    expect(inUrl.json()).toEqual(
      refusal('$rotate-secret takes its parameters in a Parameters body only: a URL is written to access logs, so a secret sent in one is no secret any more'),
    );
    expect(await storedSecretOf(id)).toBe(current);
    expect(await rotationsOf(id)).toEqual([]);
    // A client header may not take the name of the new signature header.
    const clash = await t.fhir('POST', '/Subscription', {
      resourceType: 'Subscription',
      status: 'requested',
      criteria: 'Patient?family=Clash',
      reason: 'test',
      channel: { type: 'rest-hook', endpoint: endpoint.url, header: ['X-Hub-Signature-Next: sha256=forged'] },
    });
    expect(clash.statusCode).toBe(400);
    expect(clash.json().issue[0].details.text).toBe(
      "ValidationError: ['channel.header item 1 (X-Hub-Signature-Next) is set by the service, and a client value would break signature checks']",
    );
  });
});

describe('subscriptions rotate-secret ID (CLI)', () => {
  const settings = { SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'), BASE_URL: baseUrl, LOG_LEVEL: 'warn', SECRET_ROTATION_OVERLAP_SECONDS: '3' };
  const cli = (args: string[], input?: string, overrides: Record<string, string> = {}) =>
    runCommand(
      process.execPath,
      [cliEntry, 'subscriptions', 'rotate-secret', ...args],
      childEnvironment({ ...settings, DATABASE_URL: t.database.url, ...overrides }),
      input,
    );

  it(
    'reads the new secret from standard input, signs with both for the overlap, records the operator; refuses a wrong id, secret or state',
    { timeout: 60_000 },
    async () => {
      const [oldSecret, newSecret] = [secretNamed('cli-old'), secretNamed('cli-new')];
      const scene = await verifyingReceiver([oldSecret, newSecret]);
      const { id } = await subscribe(t, 'Patient?family=Operator', scene.endpoint.url, { header: [`secret: ${oldSecret}`] });
      await untilStatus(t, id, 'active');

      const empty = await cli([id]);
      expect(empty.exitCode, empty.output).toBe(2);
      expect(empty.output).toBe('Not rotated: The new secret is empty.\n');
      const wrongId = await cli(['not-an-id'], `${newSecret}\n`);
      expect(wrongId.exitCode).toBe(2);
      expect(wrongId.output).toContain("'not-an-id' is not a subscription id");
      const wrongOverlap = await cli([id, '--overlap-seconds', 'soon'], `${newSecret}\n`);
      expect(wrongOverlap.exitCode).toBe(2);
      expect(wrongOverlap.output).toContain('expected a whole number of seconds from 0 to 2592000');
      const withoutKey = await cli([id], `${newSecret}\n`, { SECRETS_ENCRYPTION_KEY: '' });
      expect(withoutKey.exitCode).toBe(2);
      expect(withoutKey.output).toContain('SECRETS_ENCRYPTION_KEY is required with DATABASE_URL');
      expect(await storedSecretOf(id)).toBe(oldSecret);

      // As `printf '%s\n' "$SECRET" | npm run cli -- subscriptions rotate-secret ID` gives it: the line break is not part of it.
      const done = await cli([id], `${newSecret}\n`);
      expect(done.exitCode, done.output).toBe(0);
      const [rotation] = await rotationsOf(id);
      expect(rotation).toMatchObject({ rotated_by_api_key: null, rotated_by_operator: userInfo().username });
      expect(rotation!.previous_secret_until.getTime() - rotation!.rotated_at.getTime()).toBe(3_000);
      expect(done.output).toBe(
        `Rotated the signing secret of subscription ${id}. Until ${formatInstant(rotation!.previous_secret_until)} every call is signed with the previous secret too ` +
          '(X-Hub-Signature with the previous one, X-Hub-Signature-Next with the new one, webhook-signature with both), then with the new one only.\n',
      );
      expect(done.output).not.toContain(newSecret);
      expect(await storedSecretOf(id)).toBe(newSecret);
      const event = await patient('Operator');
      await expectSignedWithBoth(await delivered(scene, event.id), oldSecret, newSecret);

      const tooSoon = await cli([id], secretNamed('cli-too-soon'));
      expect(tooSoon.exitCode).toBe(1);
      expect(tooSoon.output).toMatch(
        new RegExp(`^Not rotated: Subscription/${id} is in the overlap of its last rotation until .*Z: .* Rotate again once it has ended\\.\\n$`),
      );
      const unknown = await cli(['00000000-0000-4000-8000-000000000000'], secretNamed('cli-unknown'));
      expect(unknown.exitCode).toBe(1);
      expect(unknown.output).toBe('Not rotated: Subscription/00000000-0000-4000-8000-000000000000 is not known.\n');

      // After the overlap, with none: the newest secret alone, at once.
      await untilPassed(rotation!.previous_secret_until);
      const newest = secretNamed('cli-newest');
      scene.holding = [newest];
      const immediate = await cli([id, '--overlap-seconds', '0'], newest);
      expect(immediate.exitCode, immediate.output).toBe(0);
      expect(immediate.output).toBe(`Rotated the signing secret of subscription ${id}: every call from now on is signed with the new secret only.\n`);
      const next = await patient('Operator');
      await expectSignedWithOnly(await delivered(scene, next.id), newest, newSecret);
      expect(scene.refused).toEqual([]);
    },
  );
});

describe('the record of rotations', () => {
  it('says who rotated and when, and no secret is in any table, answer or log line of this file', async () => {
    const scene = await verifyingReceiver([]);
    scene.endpoint.answer = () => ({ status: 200 });
    const key = await createApiKey(t.database.db, 'rotating client', ['read', 'write']);
    const first = secretNamed('audited-first');
    const created = await t.fhir(
      'POST',
      '/Subscription',
      {
        resourceType: 'Subscription',
        status: 'requested',
        criteria: 'Patient?family=Audited',
        reason: 'test',
        channel: { type: 'rest-hook', endpoint: scene.endpoint.url, header: [`secret: ${first}`] },
      },
      { 'x-api-key': key.key },
    );
    const { id } = created.json<{ id: string }>();
    const asked = new Date();
    const answer = await rotateTo(id, secretNamed('audited-second'), 60, { 'x-api-key': key.key });
    expect(answer.statusCode, answer.body).toBe(200);
    const [rotation] = await rotationsOf(id);
    expect(rotation).toEqual({
      rotated_at: instantOf(answer.json(), 'rotatedAt'),
      rotated_by_api_key: key.id,
      rotated_by_operator: null,
      previous_secret_until: instantOf(answer.json(), 'previousSecretUntil'),
    });
    expect(rotation!.rotated_at.getTime()).toBeGreaterThanOrEqual(asked.getTime() - 1_000);
    const logged = logLines
      .map((line) => JSON.parse(line) as { msg: string; subscriptionId?: string })
      .filter((line) => line.subscriptionId === id && line.msg === 'subscription signing secret rotated');
    expect(logged).toHaveLength(1);

    // Every row of every table, as text, and every log line.
    const { rows: tables } = await t.database.pool.query<{ name: string }>(
      `SELECT format('%I.%I', table_schema, table_name) AS name FROM information_schema.tables
       WHERE table_schema IN ('webhook', 'graphile_worker', 'fhir', 'public') AND table_type = 'BASE TABLE'`,
    );
    let records = '';
    for (const { name } of tables) records += JSON.stringify((await t.database.pool.query(`SELECT * FROM ${name}`)).rows);
    expect(records).toContain(id);
    const log = logLines.join('\n');
    expect(usedSecrets.size).toBeGreaterThan(2);
    for (const secret of usedSecrets) {
      expect(records, `${secret} in the records`).not.toContain(secret);
      expect(log, `${secret} in the log`).not.toContain(secret);
    }
  });
});
