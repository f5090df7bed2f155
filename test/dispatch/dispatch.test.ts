import { verify } from '@octokit/webhooks-methods';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { startReceiver, waitFor, type Receiver } from '../support/receiver.ts';
import { attemptsOf, statusOf, subscribe, untilStatus } from '../support/subscriptions.ts';

let t: TestApp;
let workers: Workers;
const receivers: Receiver[] = [];

const config = loadConfig({
  BASE_URL: baseUrl,
  // The receivers are on loopback, which the SSRF guard refuses by default.
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
  DELIVERY_RETRY_DELAYS_MS: '100,200',
  DELIVERY_MAX_FAILURES: '3',
  DELIVERY_RESPONSE_TIMEOUT_MS: '3000',
  WORKER_CONCURRENCY: '4',
});

beforeAll(async () => {
  t = await startTestApp();
  workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
});
afterAll(async () => {
  await workers.stop();
  await Promise.all(receivers.map((receiver) => receiver.close()));
  await t.close();
});

/** An Appointment's participant (R4 requires one, with a status) and, for a booked one, its start and end (app-3). */
const someone = [{ actor: { reference: 'Practitioner/dispatch-doc' }, status: 'accepted' }];
const halfAnHour = { start: '2026-03-02T09:00:00Z', end: '2026-03-02T09:30:00Z' };

async function receiver(): Promise<Receiver> {
  const started = await startReceiver();
  receivers.push(started);
  return started;
}

describe('handshake', () => {
  it('POSTs a signed history Bundle with a handshake SubscriptionStatus; 2xx makes the subscription active', async () => {
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Practitioner?active=true', endpoint.url, { header: ['secret: top-secret', 'Authorization: Bearer a:b:c'] });
    const [call] = await endpoint.waitForCalls(1);
    expect(call!.json).toMatchObject({
      resourceType: 'Bundle',
      type: 'history',
      entry: [
        {
          resource: {
            resourceType: 'SubscriptionStatus',
            type: 'handshake',
            status: 'requested',
            subscription: { reference: `${baseUrl}/fhir/resources/Subscription/${id}` },
          },
        },
      ],
    });
    expect(call!.headers['content-type']).toBe('application/fhir+json');
    expect(call!.headers.secret).toBe('top-secret');
    expect(call!.headers.authorization).toBe('Bearer a:b:c');
    expect(await verify('top-secret', call!.body.toString('utf8'), call!.headers['x-hub-signature'] as string)).toBe(true);
    await untilStatus(t, id, 'active');
  });

  it('a 4xx answer puts the subscription in error with the reason', async () => {
    const endpoint = await receiver();
    endpoint.answer = () => ({ status: 403 });
    const { id } = await subscribe(t, 'Practitioner?active=false', endpoint.url);
    await untilStatus(t, id, 'error');
    expect((await statusOf(t, id)).error).toBe(`Handshake failed: HTTP 403 from ${endpoint.url}`);
    expect(endpoint.calls).toHaveLength(1);
  });

  it('5xx on every attempt puts it in error after the retries', async () => {
    const endpoint = await receiver();
    endpoint.answer = () => ({ status: 503 });
    const { id } = await subscribe(t, 'Practitioner?gender=male', endpoint.url);
    await untilStatus(t, id, 'error');
    expect(endpoint.calls).toHaveLength(3);
    const { rows } = await t.database.pool.query(
      `SELECT attempt, outcome, http_status FROM webhook.delivery_attempts WHERE subscription_id = $1 ORDER BY attempt`,
      [id],
    );
    expect(rows).toEqual([
      { attempt: 1, outcome: 'retrying', http_status: 503 },
      { attempt: 2, outcome: 'retrying', http_status: 503 },
      { attempt: 3, outcome: 'failed', http_status: 503 },
    ]);
  });
});

describe('network failures', () => {
  it('a refused connection on every attempt puts the subscription in error, with the network error as reason', async () => {
    const closed = await receiver();
    const url = closed.url;
    await closed.close();
    const { id } = await subscribe(t, 'Practitioner?gender=female', url);
    await untilStatus(t, id, 'error');
    const { rows } = await t.database.pool.query(
      `SELECT attempt, outcome, http_status, error FROM webhook.delivery_attempts WHERE subscription_id = $1 ORDER BY attempt`,
      [id],
    );
    expect(rows.map((row: { outcome: string }) => row.outcome)).toEqual(['retrying', 'retrying', 'failed']);
    for (const row of rows) expect(row).toMatchObject({ http_status: null, error: expect.stringContaining('ECONNREFUSED') });
    expect((await statusOf(t, id)).error).toMatch(new RegExp(`^Handshake failed: .*ECONNREFUSED.* from ${url.replace(/[.?]/g, '\\$&')}$`));
  });
});

describe('notifications', () => {
  it('delivers the matching resource version, signed, with the channel headers', async () => {
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Appointment?status=booked', endpoint.url, { header: ['secret: s3cr3t', 'X-Trace: a:b=c'] });
    await untilStatus(t, id, 'active');
    await t.fhir('POST', '/Appointment', { resourceType: 'Appointment', status: 'proposed', participant: someone });
    const created = (await t.fhir('POST', '/Appointment', { resourceType: 'Appointment', status: 'booked', ...halfAnHour, participant: someone })).json();
    const calls = await endpoint.waitForCalls(2);
    const notification = calls[1]!;
    expect(notification.json).toEqual(created);
    expect(notification.headers['x-trace']).toBe('a:b=c');
    expect(notification.headers.secret).toBe('s3cr3t');
    expect(await verify('s3cr3t', notification.body.toString('utf8'), notification.headers['x-hub-signature'] as string)).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(endpoint.calls).toHaveLength(2);
  });

  it('delivers a searchset Bundle with the includes for _include criteria', async () => {
    const endpoint = await receiver();
    await t.fhir('PUT', '/Patient/inc-p', { resourceType: 'Patient', id: 'inc-p', name: [{ family: 'Included' }] });
    const { id } = await subscribe(t, 'Appointment?status=arrived&_include=Appointment:patient', endpoint.url);
    await untilStatus(t, id, 'active');
    const created = (
      await t.fhir('POST', '/Appointment', {
        resourceType: 'Appointment',
        status: 'arrived',
        ...halfAnHour,
        participant: [{ actor: { reference: 'Patient/inc-p' }, status: 'accepted' }],
      })
    ).json();
    const [, call] = await endpoint.waitForCalls(2);
    expect(call!.json).toMatchObject({
      resourceType: 'Bundle',
      type: 'searchset',
      total: 1,
      entry: [
        { resource: { id: created.id }, search: { mode: 'match' } },
        { resource: { resourceType: 'Patient', id: 'inc-p' }, search: { mode: 'include' } },
      ],
    });
  });

  it('delivers a searchset Bundle with the referring resources for _revinclude criteria', async () => {
    const endpoint = await receiver();
    await t.fhir('PUT', '/Encounter/rev-e', {
      resourceType: 'Encounter',
      id: 'rev-e',
      status: 'finished',
      class: { code: 'AMB' },
      subject: { reference: 'Patient/rev-p' },
    });
    const { id } = await subscribe(t, 'Patient?family=Revincluded&_revinclude=Encounter:subject', endpoint.url);
    await untilStatus(t, id, 'active');
    await t.fhir('PUT', '/Patient/rev-p', { resourceType: 'Patient', id: 'rev-p', name: [{ family: 'Revincluded' }] });
    const [, call] = await endpoint.waitForCalls(2);
    expect(call!.json).toMatchObject({
      resourceType: 'Bundle',
      type: 'searchset',
      total: 1,
      entry: [
        { resource: { resourceType: 'Patient', id: 'rev-p' }, search: { mode: 'match' } },
        { resource: { resourceType: 'Encounter', id: 'rev-e' }, search: { mode: 'include' } },
      ],
    });
  });

  it('delivers deletions tagged DELETE, whatever the non-status filters say', async () => {
    const endpoint = await receiver();
    const created = (
      await t.fhir('POST', '/Appointment', {
        resourceType: 'Appointment',
        status: 'noshow',
        start: '2026-01-01T10:00:00Z',
        end: '2026-01-01T10:30:00Z',
        participant: someone,
      })
    ).json();
    const { id } = await subscribe(t, 'Appointment?date=lt1900-01-01&status=noshow', endpoint.url);
    await untilStatus(t, id, 'active');
    await t.fhir('DELETE', `/Appointment/${created.id}`);
    const [, call] = await endpoint.waitForCalls(2);
    expect(call!.json).toMatchObject({ resourceType: 'Appointment', id: created.id, meta: { versionId: '2', tag: [{ code: 'DELETE' }] } });
  });

  it('delivers nothing for a rolled-back transaction', async () => {
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Appointment?status=waitlist', endpoint.url);
    await untilStatus(t, id, 'active');
    const response = await t.fhir('POST', '/Bundle', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        { resource: { resourceType: 'Appointment', status: 'waitlist', participant: someone }, request: { method: 'POST', url: 'Appointment' } },
        { request: { method: 'DELETE', url: 'Appointment/does-not-exist' } },
      ],
    });
    expect(response.statusCode).toBe(404);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(endpoint.calls).toHaveLength(1);
  });
});

describe('failures, deactivation and reactivation', () => {
  it('retries 5xx, deactivates at the third failure, records an alert; the next event reactivates and is delivered', async () => {
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Encounter?status=planned', endpoint.url);
    await untilStatus(t, id, 'active');
    endpoint.answer = () => ({ status: 500 });
    const failed = (await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'planned', class: { code: 'AMB' } })).json();
    await untilStatus(t, id, 'error');
    expect(endpoint.calls).toHaveLength(4);
    const state = await statusOf(t, id);
    expect(state.error).toBe(`HTTP 500 from ${endpoint.url}; Encounter/${failed.id} (version 1) was not delivered`);
    const alert = await waitFor(async () => {
      const { rows } = await t.database.pool.query(`SELECT recipients, handled_as FROM webhook.deactivation_alerts WHERE subscription_id = $1`, [id]);
      return rows[0]?.handled_as ? rows[0] : undefined;
    });
    // No SMTP_URL in this configuration: logged and recorded.
    expect(alert).toEqual({ recipients: ['ops@example.org'], handled_as: 'logged' });

    endpoint.answer = () => ({ status: 200 });
    const next = (await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'planned', class: { code: 'IMP' } })).json();
    const calls = await endpoint.waitForCalls(6);
    expect(calls[4]!.json).toMatchObject({ resourceType: 'Bundle', type: 'history' });
    expect(calls[5]!.json).toEqual(next);
    await untilStatus(t, id, 'active');
    expect((await statusOf(t, id)).failure_count).toBe(0);
  });

  it('a subscriber that answers handshakes and fails notifications flaps once, then waits longer each time before an event may reactivate it; a delivery ends the run', async () => {
    const endpoint = await receiver();
    endpoint.answer = (request) => ({ status: request.json.type === 'history' ? 200 : 503 });
    const criteria = 'Encounter?status=finished';
    const { id } = await subscribe(t, criteria, endpoint.url);
    await untilStatus(t, id, 'active');
    const finished = (code: string) => t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'finished', class: { code } });
    const run = async () =>
      (
        await t.database.pool.query<{ status: string; deactivations: number; waits: number | null }>(
          `SELECT status, deactivations_in_a_row AS deactivations,
                extract(epoch FROM reactivation_not_before - (SELECT max(created_at) FROM webhook.deactivation_alerts WHERE subscription_id = $1))::float AS waits
         FROM webhook.subscriptions WHERE id = $1`,
          [id],
        )
      ).rows[0]!;

    // The first deactivation: the next event reactivates it, as the specification says.
    await finished('AMB');
    await untilStatus(t, id, 'error');
    expect(await run()).toMatchObject({ status: 'error', deactivations: 1 });
    // waits: reactivation_not_before (the deactivating transaction's now() plus the backoff) less the
    // alert's created_at (clock_timestamp(), a moment later in that work): the backoff, less the moment
    // between, which a loaded machine stretches. The backoff's own steps: the next test.
    expect((await run()).waits).toBeGreaterThan(-0.5);
    expect((await run()).waits).toBeLessThanOrEqual(0.001);
    const handshakesBefore = endpoint.calls.filter((call) => call.json.type === 'history').length;
    await finished('IMP');
    await waitFor(async () => ((await run()).deactivations === 2 ? true : undefined));
    expect(endpoint.calls.filter((call) => call.json.type === 'history')).toHaveLength(handshakesBefore + 1);
    // Back in error without a delivery: the events of the next second leave it there.
    expect((await run()).waits).toBeGreaterThan(0.5);
    expect((await run()).waits).toBeLessThanOrEqual(1.001);
    const write = `INSERT INTO fhir.resources (content) VALUES ('{"resourceType": "Encounter", "status": "finished", "class": {"code": "EMER"}}')`;
    await t.database.pool.query(`UPDATE webhook.subscriptions SET reactivation_not_before = now() + interval '1 hour' WHERE id = $1`, [id]);
    expect(await workMadeBy(write, [id])).toEqual([]);
    await t.database.pool.query(`UPDATE webhook.subscriptions SET reactivation_not_before = now() - interval '1 second' WHERE id = $1`, [id]);
    expect(await workMadeBy(write, [id])).toEqual([{ work: 'subscription_reactivation', subscription: id }]);

    // The receiver mended, an event after the wait reactivates it, and its delivery ends the run.
    endpoint.answer = () => ({ status: 200 });
    const mended = (await finished('HH')).json();
    await waitFor(async () => (endpoint.calls.some((call) => call.json.id === mended.id) ? true : undefined));
    await waitFor(async () => ((await run()).deactivations === 0 ? true : undefined));
    expect(await run()).toMatchObject({ status: 'active', deactivations: 0, waits: null });
  });

  it('waits 1 s, 2 s, 4 s, ... up to 5 minutes after the second, third, fourth deactivation in a row', async () => {
    const { rows } = await t.database.pool.query<{ seconds: number[] }>(
      `SELECT array_agg(extract(epoch FROM webhook.reactivation_backoff(n))::int ORDER BY n) AS seconds FROM generate_series(0, 12) n`,
    );
    expect(rows[0]!.seconds).toEqual([0, 0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
  });

  it('never calls a subscription in error again once a newer one for its criteria is live; switching the criteria off ends both', async () => {
    const criteria = 'Encounter?status=onleave';
    const old = await receiver();
    old.answer = () => ({ status: 403 });
    const { id: oldId } = await subscribe(t, criteria, old.url);
    await untilStatus(t, oldId, 'error');
    const successor = await receiver();
    const { id: newId } = await subscribe(t, criteria, successor.url);
    await untilStatus(t, newId, 'active');

    // The trigger enqueues no reactivation for the superseded one.
    const onleave = `INSERT INTO fhir.resources (content) VALUES ('{"resourceType": "Encounter", "status": "onleave", "class": {"code": "AMB"}}')`;
    expect(await workMadeBy(onleave, [oldId, newId])).toEqual([{ work: 'notification event', subscription: newId }]);

    // Through the API: the successor is notified, the old endpoint never hears again.
    const written = (await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'onleave', class: { code: 'AMB' } })).json();
    const [, notification] = await successor.waitForCalls(2);
    expect(notification!.json).toMatchObject({ resourceType: 'Encounter', id: written.id });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(old.calls).toHaveLength(1);
    expect((await statusOf(t, oldId)).status).toBe('error');

    // Superseded for good: even when its successor goes to error, only the successor is reactivated.
    await t.database.pool.query(`UPDATE webhook.subscriptions SET status = 'error' WHERE id = $1`, [newId]);
    expect(await workMadeBy(onleave, [oldId, newId])).toEqual([{ work: 'subscription_reactivation', subscription: newId }]);

    const off = await t.fhir('POST', '/Subscription', { resourceType: 'Subscription', status: 'off', criteria });
    expect(off.statusCode).toBe(200);
    expect(off.json()).toMatchObject({ id: newId, status: 'off' });
    expect((await statusOf(t, oldId)).status).toBe('off');
    expect((await statusOf(t, newId)).status).toBe('off');
  });

  it('a blip of the subscriber fails three events together: each is retried with spacing and delivered, and the subscription stays active', async () => {
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Encounter?status=triaged', endpoint.url);
    await untilStatus(t, id, 'active');
    endpoint.answer = () => ({ status: endpoint.calls.length <= 4 ? 503 : 200 });
    // One statement, three events: their first attempts run together and all meet the blip.
    const { rows } = await t.database.pool.query<{ id: string }>(
      `INSERT INTO fhir.resources (content) SELECT '{"resourceType": "Encounter", "status": "triaged", "class": {"code": "AMB"}}'::jsonb FROM generate_series(1, 3) RETURNING id`,
    );
    await endpoint.waitForCalls(7);
    const notificationsOf = async () => (await attemptsOf(t, id)).filter((row) => row.kind === 'notification');
    await waitFor(async () => ((await notificationsOf()).filter((row) => row.outcome === 'delivered').length === 3 ? true : undefined));
    expect(await statusOf(t, id)).toMatchObject({ status: 'active', failure_count: 0 });
    for (const { id: resourceId } of rows) {
      expect((await notificationsOf()).filter((row) => row.resource_id === resourceId)).toMatchObject([
        { attempt: 1, outcome: 'retrying', http_status: 503 },
        { attempt: 2, outcome: 'delivered', http_status: 200 },
      ]);
    }
  });

  it('deactivates after DELIVERY_MAX_FAILURES events in a row refused for good with a 4xx, naming the last', async () => {
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Encounter?status=in-progress', endpoint.url);
    await untilStatus(t, id, 'active');
    endpoint.answer = () => ({ status: 400 });
    const written: string[] = [];
    for (let event = 1; event <= 3; event++) {
      written.push((await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'in-progress', class: { code: 'AMB' } })).json().id);
      await endpoint.waitForCalls(1 + event);
      if (event < 3) await waitFor(async () => ((await statusOf(t, id)).failure_count === event ? true : undefined));
    }
    await untilStatus(t, id, 'error');
    expect((await statusOf(t, id)).error).toBe(`HTTP 400 from ${endpoint.url}; Encounter/${written[2]} (version 1) was not delivered`);
    expect((await attemptsOf(t, id)).filter((row) => row.kind === 'notification').map((row) => row.outcome)).toEqual(['failed', 'failed', 'failed']);
  });

  it('does not resend an event refused with a 4xx, but counts it', async () => {
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Encounter?status=arrived', endpoint.url);
    await untilStatus(t, id, 'active');
    endpoint.answer = () => ({ status: 422 });
    await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', status: 'arrived', class: { code: 'AMB' } });
    await endpoint.waitForCalls(2);
    await waitFor(async () => ((await statusOf(t, id)).failure_count === 1 ? true : undefined));
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(endpoint.calls).toHaveLength(2);
    expect((await statusOf(t, id)).status).toBe('active');
  });
});

/**
 * The work for these subscriptions that a write makes (its events in the log,
 * graphile-worker jobs by their keys), seen inside its transaction (whose
 * start time, now(), its events were written at), which is then rolled back.
 */
async function workMadeBy(write: string, subscriptionIds: string[]): Promise<{ work: string; subscription: string }[]> {
  const client = await t.database.pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(write);
    const { rows } = await client.query<{ work: string; subscription: string }>(
      `SELECT 'notification event' AS work, subscription_id::text AS subscription FROM webhook.subscription_events WHERE subscription_id::text = ANY($1) AND written_at = now()
       UNION ALL
       SELECT task_identifier, substring(key FROM ':(.*)$') FROM graphile_worker.jobs WHERE substring(key FROM ':(.*)$') = ANY($1) AND created_at = now()`,
      [subscriptionIds],
    );
    return rows;
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}
