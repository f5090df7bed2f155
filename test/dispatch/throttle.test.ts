import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { childEnvironment, cliEntry } from '../support/commands.ts';
import { startReceiver, waitFor, type Receiver } from '../support/receiver.ts';
import { untilStatus } from '../support/subscriptions.ts';

/**
 * A throttled subscriber (issue 19): a subscription limited to N calls a
 * second gets no more, measured at its receiver, with two worker processes
 * sharing the work; an unthrottled one beside it is not slowed.
 */

let t: TestApp;
const receivers: Receiver[] = [];
const workers: ReturnType<typeof spawn>[] = [];
const extension = `${baseUrl}/fhir/resources/StructureDefinition/max-calls-per-second`;

beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  for (const worker of workers) if (worker.exitCode === null && worker.signalCode === null) worker.kill('SIGKILL');
  await Promise.all(receivers.map((receiver) => receiver.close()));
  await t.close();
});

function subscription(criteria: string, endpoint: string, channelExtension?: unknown[]) {
  return {
    resourceType: 'Subscription',
    status: 'requested',
    reason: 'throttle',
    criteria,
    channel: { ...(channelExtension === undefined ? {} : { extension: channelExtension }), type: 'rest-hook', endpoint, payload: 'application/fhir+json' },
  };
}

describe('max-calls-per-second', () => {
  it('is taken on channel as a valueDecimal, echoed, and refused when it means nothing', async () => {
    const created = await t.fhir(
      'POST',
      '/Subscription',
      subscription('Patient?family=Echoed', 'http://127.0.0.1:9/none', [{ url: extension, valueDecimal: 2.5 }]),
    );
    expect(created.statusCode, created.body).toBe(201);
    expect(created.json().channel.extension).toEqual([{ url: extension, valueDecimal: 2.5 }]);
    for (const value of [0, -1, '5', 20_000]) {
      const refused = await t.fhir(
        'POST',
        '/Subscription',
        subscription(`Patient?family=Refused${String(value)}`, 'http://127.0.0.1:9/none', [{ url: extension, valueDecimal: value }]),
      );
      expect(refused.statusCode).toBe(400);
      expect(refused.json().issue[0].details.text).toContain("channel's max-calls-per-second must be a valueDecimal above 0, at most 10,000");
    }
  });

  it('holds at the receiver with two worker processes, while an unthrottled subscription beside it is not slowed', { timeout: 90_000 }, async () => {
    // More events than one claim sends (10 batches of 100): the spacing goes on across a release and a new claim, by either process.
    const rate = 200;
    const events = 1_100;
    const throttled = await startReceiver();
    const unthrottled = await startReceiver();
    receivers.push(throttled, unthrottled);
    const arrivals: number[] = [];
    const unthrottledArrivals: number[] = [];
    throttled.answer = (call) => (call.json.resourceType === 'Patient' && arrivals.push(performance.now()), { status: 200 });
    unthrottled.answer = (call) => (call.json.resourceType === 'Patient' && unthrottledArrivals.push(performance.now()), { status: 200 });

    for (let n = 0; n < 2; n++) {
      workers.push(
        spawn(process.execPath, [cliEntry, 'worker'], {
          env: childEnvironment({
            DATABASE_URL: t.database.url,
            SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'),
            BASE_URL: baseUrl,
            WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
            MIGRATE_ON_START: 'false',
            LOG_LEVEL: 'warn',
          }),
          stdio: 'ignore',
        }),
      );
    }
    const slow = (
      await t.fhir('POST', '/Subscription', subscription('Patient?family=Throttled', throttled.url, [{ url: extension, valueDecimal: rate }]))
    ).json<{ id: string }>();
    const fast = (await t.fhir('POST', '/Subscription', subscription('Patient?family=Throttled&active=true', unthrottled.url))).json<{ id: string }>();
    await untilStatus(t, slow.id, 'active', 30_000);
    await untilStatus(t, fast.id, 'active', 30_000);

    const written = performance.now();
    await t.database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Patient', 'id', 'throttled-' || n, 'active', true, 'name', jsonb_build_array(jsonb_build_object('family', 'Throttled')))
       FROM generate_series(1, $1::int) n`,
      [events],
    );
    await waitFor(() => (arrivals.length === events ? true : undefined), 30_000, `${events} throttled deliveries`);
    const measured = (events - 1) / ((arrivals.at(-1)! - arrivals[0]!) / 1000);
    console.log(
      `throttled at ${rate}/s: ${measured.toFixed(1)} calls/s at the receiver; unthrottled: all ${events} in ${Math.round(unthrottledArrivals.at(-1)! - written)} ms`,
    );
    expect(measured).toBeGreaterThan(rate * 0.9);
    expect(measured).toBeLessThan(rate * 1.1);
    // The sender of the last calls left where the spacing stands, for whichever process claims next.
    const { rows } = await t.database.pool.query(`SELECT next_call_at FROM webhook.subscription_streams WHERE subscription_id = $1`, [slow.id]);
    expect(rows[0].next_call_at).toBeInstanceOf(Date);
    // Across the claims as within one: no stretch of 100 calls faster than the limit allows.
    for (let from = 0; from + 100 < arrivals.length; from += 50) expect(100 / ((arrivals[from + 100]! - arrivals[from]!) / 1000)).toBeLessThan(rate * 1.1);
    // The unthrottled one had them all long before: it did not wait behind the throttled one.
    expect(unthrottledArrivals).toHaveLength(events);
    expect(unthrottledArrivals.at(-1)!).toBeLessThan(arrivals.at(-1)! - 2_000);
  });
});
