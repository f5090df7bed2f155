import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { maxEventsPerClaim } from '../../src/db/sql/claim-subscription-events.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { listenOnLoopback, startReceiver, waitFor } from '../support/receiver.ts';
import { childEnvironment, cliEntry } from '../support/commands.ts';
import { subscribe, untilStatus } from '../support/subscriptions.ts';
import { eventNumbers, type Json } from '../support/backport-conformance.ts';
import { addTopics } from '../../src/topics/store.ts';

/**
 * The dispatcher under load: a bulk SQL insert fanned out to 20,000
 * deliveries, and two worker processes sharing one database's queue.
 */

/** Things to close after each test, newest first. */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Until no event is pending and graphile-worker holds no job at all (a failed job would stay, with its error). */
async function untilNothingPending(t: TestApp, timeoutMs: number): Promise<void> {
  await waitFor(
    async () => {
      const { rows } = await t.database.pool.query<{ count: number }>(
        `SELECT (SELECT count(*) FROM graphile_worker.jobs) + (SELECT count(*) FROM webhook.subscription_events WHERE status = 'pending')::int AS count`,
      );
      return Number(rows[0]!.count) === 0 ? true : undefined;
    },
    timeoutMs,
    'no pending event and an empty job queue',
  );
}

/** How many times each id was delivered, for the ids that were delivered more or less than once. */
function notExactlyOnce(delivered: readonly string[], expected: readonly string[]): Record<string, number> {
  const counts = new Map<string, number>(expected.map((id) => [id, 0]));
  for (const id of delivered) counts.set(id, (counts.get(id) ?? 0) + 1);
  return Object.fromEntries([...counts].filter(([, count]) => count !== 1));
}

const bulkIds = (prefix: string, count: number) => Array.from({ length: count }, (_, index) => `${prefix}-${index + 1}`);

describe('a 20,000-row SQL insert', () => {
  it('delivers each matching resource exactly once', { timeout: 180_000 }, async () => {
    const t = await startTestApp();
    cleanups.push(() => t.close());
    const concurrency = 32;
    const config = loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', WORKER_CONCURRENCY: String(concurrency) });
    const workers: Workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
    cleanups.push(() => workers.stop());
    const endpoint = await startReceiver();
    cleanups.push(() => endpoint.close());

    const { id } = await subscribe(t, 'Observation?status=final', endpoint.url);
    await untilStatus(t, id, 'active', 20_000);
    await endpoint.waitForCalls(1);

    const count = 20_000;
    const started = performance.now();
    await t.database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Observation', 'id', 'bulk-' || n, 'status', 'final', 'code', jsonb_build_object('text', 'load ' || n))
       FROM generate_series(1, $1::int) AS n`,
      [count],
    );
    const inserted = performance.now();
    await endpoint.waitForCalls(1 + count, 150_000);
    const delivered = performance.now();
    console.log(
      `${count} rows: insert ${Math.round(inserted - started)} ms, all delivered ${Math.round(delivered - started)} ms after it began ` +
        `(${Math.round(count / ((delivered - started) / 1000))} deliveries/s, concurrency ${concurrency})`,
    );
    await untilNothingPending(t, 30_000);

    const notifications = endpoint.calls.slice(1);
    expect(notifications).toHaveLength(count);
    expect(notifications.every((call) => call.json.resourceType === 'Observation')).toBe(true);
    expect(
      notExactlyOnce(
        notifications.map((call) => call.json.id as string),
        bulkIds('bulk', count),
      ),
    ).toEqual({});
    const { rows } = await t.database.pool.query(
      `SELECT outcome, attempt, count(*)::int AS count FROM webhook.delivery_attempts WHERE subscription_id = $1 AND kind = 'notification' GROUP BY 1, 2`,
      [id],
    );
    expect(rows).toEqual([{ outcome: 'delivered', attempt: 1, count }]);
  });
});

describe('a stream longer than one claim', () => {
  it(
    'goes on batch after batch; a failure in the middle ends the claim with the next batch claimed, and every event still arrives once, numbered 1 to N',
    { timeout: 60_000 },
    async () => {
      const t = await startTestApp();
      cleanups.push(() => t.close());
      const config = loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_RETRY_DELAYS_MS: '200,200' });
      const workers: Workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
      cleanups.push(() => workers.stop());
      const endpoint = await startReceiver();
      cleanups.push(() => endpoint.close());
      const { id } = await subscribe(t, 'Observation?status=final', endpoint.url);
      await untilStatus(t, id, 'active', 20_000);
      await endpoint.waitForCalls(1);

      // The 250th call is refused once (503): by then the sender holds its third batch and has claimed the fourth.
      const count = 4 * maxEventsPerClaim + 10;
      let refused: string | undefined;
      endpoint.answer = (call) => {
        if (refused === undefined && endpoint.calls.length === 1 + 250) {
          refused = call.json.id as string;
          return { status: 503 };
        }
        return { status: 200 };
      };
      await t.database.pool.query(
        `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Observation', 'id', 'stream-' || n, 'status', 'final', 'code', jsonb_build_object('text', 'n ' || n))
       FROM generate_series(1, $1::int) AS n`,
        [count],
      );
      await endpoint.waitForCalls(1 + count + 1, 30_000);
      await untilNothingPending(t, 30_000);

      expect(refused).toBeDefined();
      const delivered = endpoint.calls.slice(1).map((call) => call.json.id as string);
      expect(
        notExactlyOnce(
          delivered.filter((resource) => resource !== refused),
          bulkIds('stream', count).filter((resource) => resource !== refused),
        ),
      ).toEqual({});
      expect(delivered.filter((resource) => resource === refused)).toHaveLength(2);
      const { rows } = await t.database.pool.query<{ numbers: string[]; delivered: number; retried: number }>(
        `SELECT array_agg(DISTINCT event_number ORDER BY event_number) AS numbers,
              count(*) FILTER (WHERE outcome = 'delivered')::int AS delivered,
              count(*) FILTER (WHERE outcome = 'retrying')::int AS retried
       FROM webhook.delivery_attempts WHERE subscription_id = $1 AND kind = 'notification'`,
        [id],
      );
      expect(rows[0]!.numbers.map(Number)).toEqual(Array.from({ length: count }, (_, index) => index + 1));
      expect(rows[0]!).toMatchObject({ delivered: count, retried: 1 });
      const { rows: stream } = await t.database.pool.query(
        `SELECT webhook.last_event_number(stream.subscription_id)::int AS last_event_number, claim.claimed_by
         FROM webhook.subscription_streams stream LEFT JOIN webhook.subscription_claims claim USING (subscription_id)
         WHERE stream.subscription_id = $1`,
        [id],
      );
      expect(stream).toEqual([{ last_event_number: count, claimed_by: null }]);
    },
  );
});

describe('subscribers that hang', () => {
  it('hold one worker slot each: an unrelated subscription is still delivered at once', { timeout: 60_000 }, async () => {
    const t = await startTestApp();
    cleanups.push(() => t.close());
    const config = loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
    const workers: Workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
    cleanups.push(() => workers.stop());

    // Twenty subscribers that answer the handshake and then hold every notification (for longer
    // than this test: the response timeout is 15 s), and one that answers at once.
    const hanging = 20;
    const held = new Map<string, ServerResponse[]>();
    const hangingServer: Server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        if ((JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceType: string }).resourceType === 'Bundle')
          return void response.writeHead(200).end();
        held.set(request.url!, [...(held.get(request.url!) ?? []), response]);
      });
    });
    const hangingPort = (await listenOnLoopback(hangingServer)).port;
    cleanups.push(async () => {
      for (const response of [...held.values()].flat()) response.destroy();
      hangingServer.close();
    });
    const arrivals = new Map<string, number>();
    const answering = await listenOnLoopback(
      createServer((request, response) => {
        const chunks: Buffer[] = [];
        request.on('data', (chunk: Buffer) => chunks.push(chunk));
        request.on('end', () => {
          const json = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceType: string; id: string };
          if (json.resourceType === 'Encounter') arrivals.set(json.id, performance.now());
          response.writeHead(200).end();
        });
      }),
    );
    cleanups.push(answering.close);

    const ids: string[] = [];
    for (let n = 1; n <= hanging; n++) ids.push((await subscribe(t, `Observation?code=hang-${n}`, `http://127.0.0.1:${hangingPort}/hang/${n}`)).id);
    ids.push((await subscribe(t, 'Encounter?status=finished', `http://127.0.0.1:${answering.port}/hook`)).id);
    for (const id of ids) await untilStatus(t, id, 'active', 20_000);

    // Every 100 ms, an event for each hanging subscriber, then one for the answering one.
    const committed = new Map<string, number>();
    for (let tick = 1; tick <= 30; tick++) {
      await t.database.pool.query(
        `INSERT INTO fhir.resources (content)
         SELECT jsonb_build_object('resourceType', 'Observation', 'id', 'hang-' || n || '-' || $1::int, 'status', 'final',
                                   'code', jsonb_build_object('coding', jsonb_build_array(jsonb_build_object('code', 'hang-' || n))))
         FROM generate_series(1, $2::int) AS n`,
        [tick, hanging],
      );
      const id = `isolated-${tick}`;
      await t.database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [
        JSON.stringify({ resourceType: 'Encounter', id, status: 'finished', class: { code: 'AMB' } }),
      ]);
      committed.set(id, performance.now());
      await sleep(100);
    }
    await waitFor(() => (arrivals.size === committed.size ? true : undefined), 10_000, 'every Encounter delivered');
    const latencies = [...committed].map(([id, at]) => arrivals.get(id)! - at).sort((a, b) => a - b);
    console.log(`commit → receipt beside ${hanging} hanging subscribers: p50 ${latencies[14]!.toFixed(1)} ms, max ${latencies.at(-1)!.toFixed(1)} ms`);
    // Were the hanging subscribers able to take every worker slot, deliveries would wait for their 15 s timeouts.
    expect(latencies.at(-1)).toBeLessThan(5_000);
    expect(held.size).toBe(hanging);
    for (const responses of held.values()) expect(responses.length).toBeLessThanOrEqual(config.delivery.parallelCalls);
  });
});

type Child = { process: ChildProcess; exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>; output: () => string };

describe('two worker processes on one database', () => {
  const perProcessConcurrency = 8;
  const children: Child[] = [];
  afterAll(() => {
    // Whatever a failed test left running.
    for (const child of children) if (child.process.exitCode === null && child.process.signalCode === null) child.process.kill('SIGKILL');
  });

  function spawnWorker(databaseUrl: string): Child {
    const child = spawn(process.execPath, [cliEntry, 'worker'], {
      env: childEnvironment({
        DATABASE_URL: databaseUrl,
        SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'),
        BASE_URL: baseUrl,
        WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
        MIGRATE_ON_START: 'false',
        LOG_LEVEL: 'warn',
        WORKER_CONCURRENCY: String(perProcessConcurrency),
      }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.on('exit', (code, signal) => resolve({ code, signal })),
    );
    const started = { process: child, exited, output: () => output };
    children.push(started);
    return started;
  }

  it(
    'share the deliveries: each resource delivered exactly once per subscription, both processes working, both exiting 0 on SIGTERM',
    { timeout: 120_000 },
    async () => {
      const t = await startTestApp();
      cleanups.push(() => t.close());

      // Four subscribers, each answering after a short pause, so that calls pile up in flight.
      const subscribers = 4;
      const delivered = Array.from({ length: subscribers }, () => [] as string[]);
      const inFlight = new Array<number>(subscribers).fill(0);
      const maxInFlight = new Array<number>(subscribers).fill(0);
      const server: Server = createServer((request, response) => {
        const subscriber = Number(request.url!.split('/').pop());
        inFlight[subscriber]! += 1;
        maxInFlight[subscriber] = Math.max(maxInFlight[subscriber]!, inFlight[subscriber]!);
        const chunks: Buffer[] = [];
        request.on('data', (chunk: Buffer) => chunks.push(chunk));
        request.on('end', () => {
          const json = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceType: string; id: string };
          if (json.resourceType === 'Observation') delivered[subscriber]!.push(json.id);
          setTimeout(() => {
            inFlight[subscriber]! -= 1;
            response.writeHead(200).end('ok');
          }, 25);
        });
      });
      const { port, close } = await listenOnLoopback(server);
      cleanups.push(close);

      const first = spawnWorker(t.database.url);
      const second = spawnWorker(t.database.url);
      // The API runs in this process without workers: the children do the handshakes.
      // One live subscription per criteria: four criteria that all match.
      const criteria = ['amended', 'amended,final', 'amended,preliminary', 'amended,cancelled'].map((status) => `Observation?status=${status}`);
      const ids: string[] = [];
      for (let subscriber = 0; subscriber < subscribers; subscriber++) {
        const { id } = await subscribe(t, criteria[subscriber]!, `http://127.0.0.1:${port}/hook/${subscriber}`);
        ids.push(id);
      }
      for (const id of ids) {
        await untilStatus(t, id, 'active', 30_000).catch((error: unknown) => {
          throw new Error(`${String(error)}\nfirst worker:\n${first.output()}\nsecond worker:\n${second.output()}`);
        });
      }
      // Both processes sending before the write: one still starting (slow on a loaded machine) would
      // leave the other every subscription, not the share this test is about.
      await waitFor(
        async () => {
          const { rows } = await t.database.pool.query<{ senders: number }>(
            `SELECT count(*)::int AS senders FROM webhook.worker_pools WHERE kind = 'event-sender' AND webhook.worker_pool_is_live(last_seen)`,
          );
          return rows[0]!.senders === 2 ? true : undefined;
        },
        30_000,
        'both processes sending',
      );
      // Which senders claim subscriptions: every claim recorded as it is made (a trigger), not sampled,
      // so that a short claim between two samples is not missed (the test's database is its own).
      await t.database.pool.query(`
      CREATE TABLE public.claims_seen (claimed_by text NOT NULL, subscription_id uuid NOT NULL);
      CREATE FUNCTION public.record_claim() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO public.claims_seen VALUES (NEW.claimed_by, NEW.subscription_id);
        RETURN NULL;
      END $$;
      CREATE TRIGGER record_claim AFTER INSERT ON webhook.subscription_claims
        FOR EACH ROW EXECUTE FUNCTION public.record_claim();`);

      const count = 1_000;
      const total = count * subscribers;
      const deliveredCount = () => delivered.reduce((sum, ids) => sum + ids.length, 0);
      const started = performance.now();
      await t.database.pool.query(
        `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Observation', 'id', 'multi-' || n, 'status', 'amended', 'code', jsonb_build_object('text', 'load ' || n))
       FROM generate_series(1, $1::int) AS n`,
        [count],
      );

      // Stop one process midway: it finishes the jobs it holds and leaves the rest to the other.
      await waitFor(() => (deliveredCount() >= total / 4 ? true : undefined), 60_000, `${total / 4} deliveries`);
      first.process.kill('SIGTERM');
      const deliveredWhenFirstStopped = deliveredCount();
      expect(await first.exited).toEqual({ code: 0, signal: null });

      await waitFor(() => (deliveredCount() >= total ? true : undefined), 60_000, `${total} deliveries`);
      console.log(
        `${total} deliveries by two processes in ${Math.round(performance.now() - started)} ms; at most ${Math.max(...maxInFlight)} in flight to one subscriber; ` +
          `${deliveredWhenFirstStopped} delivered when the first one stopped`,
      );
      await untilNothingPending(t, 30_000);
      second.process.kill('SIGTERM');
      expect(await second.exited).toEqual({ code: 0, signal: null });

      for (const ids of delivered) expect(notExactlyOnce(ids, bulkIds('multi', count))).toEqual({});
      expect(deliveredWhenFirstStopped).toBeLessThan(total);
      const { rows: claimers } = await t.database.pool.query<{ claimed_by: string; claims: number }>(
        'SELECT claimed_by, count(*)::int AS claims FROM public.claims_seen GROUP BY 1 ORDER BY 1',
      );
      expect(claimers.length, `the senders that claimed: ${JSON.stringify(claimers)}`).toBe(2);
      // One subscriber never has more than DELIVERY_PARALLEL_CALLS calls in flight, whatever the number of processes.
      for (const most of maxInFlight) expect(most).toBeLessThanOrEqual(loadConfig({}).delivery.parallelCalls);
      expect(Math.max(...maxInFlight)).toBeGreaterThan(1);
      const { rows } = await t.database.pool.query(
        `SELECT outcome, attempt, count(*)::int AS count FROM webhook.delivery_attempts WHERE kind = 'notification' GROUP BY 1, 2`,
      );
      expect(rows).toEqual([{ outcome: 'delivered', attempt: 1, count: total }]);
      expect(first.output()).toBe('');
      expect(second.output()).toBe('');
    },
  );

  it(
    'a worker process killed mid-delivery: the next worker frees its claim and delivers every event within 60 s of the kill',
    { timeout: 150_000 },
    async () => {
      const t = await startTestApp();
      cleanups.push(() => t.close());
      // Slow answers keep every slot of the doomed process busy when it is killed.
      const delivered: string[] = [];
      const server: Server = createServer((request, response) => {
        const chunks: Buffer[] = [];
        request.on('data', (chunk: Buffer) => chunks.push(chunk));
        request.on('end', () => {
          const json = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceType: string; id: string };
          if (json.resourceType === 'Observation') delivered.push(json.id);
          setTimeout(() => response.writeHead(200).end('ok'), 200);
        });
      });
      const { port, close } = await listenOnLoopback(server);
      cleanups.push(close);

      // The doomed process alone first, so that it surely holds the subscription's queue when it is killed.
      const doomed = spawnWorker(t.database.url);
      const { id } = await subscribe(t, 'Observation?status=preliminary', `http://127.0.0.1:${port}/hook`);
      await untilStatus(t, id, 'active', 30_000);
      const [{ pool_id: doomedSender }] = await waitFor(async () => {
        const { rows } = await t.database.pool.query<{ pool_id: string }>(`SELECT pool_id FROM webhook.worker_pools WHERE kind = 'event-sender'`);
        return rows.length === 1 ? (rows as [{ pool_id: string }]) : undefined;
      });

      const count = 300;
      await t.database.pool.query(
        `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Observation', 'id', 'crash-' || n, 'status', 'preliminary', 'code', jsonb_build_object('text', 'load ' || n))
       FROM generate_series(1, $1::int) AS n`,
        [count],
      );
      // Kill it while it holds the subscription's claim.
      await waitFor(
        async () => {
          const { rows } = await t.database.pool.query<{ count: number }>(
            'SELECT count(*)::int AS count FROM webhook.subscription_claims WHERE claimed_by = $1',
            [doomedSender],
          );
          return rows[0]!.count > 0 && delivered.length > 20 ? true : undefined;
        },
        30_000,
        'the doomed process to hold a claim',
      );
      doomed.process.kill('SIGKILL');
      const killedAt = performance.now();
      expect(await doomed.exited).toEqual({ code: null, signal: 'SIGKILL' });
      const survivor = spawnWorker(t.database.url);

      // Done when no event is pending: the dead process's claim too, freed and sent again.
      await untilNothingPending(t, 60_000);
      console.log(`every job done ${Math.round(performance.now() - killedAt)} ms after the kill -9 of a worker process`);
      const expected = bulkIds('crash', count);
      expect(expected.filter((resourceId) => !delivered.includes(resourceId))).toEqual([]);

      // At least once: what the dead process held is sent again: the subscription's claim in flight (a
      // subscription is claimed by one sender at a time). Nothing else is repeated.
      const repeated = Object.keys(notExactlyOnce(delivered, expected));
      expect(repeated.length).toBeLessThanOrEqual(maxEventsPerClaim);
      // The dead process's registrations are gone; the live one's were left alone.
      const { rows: left } = await t.database.pool.query<{ process_id: number; kind: string }>(
        'SELECT process_id, kind FROM webhook.worker_pools ORDER BY kind',
      );
      expect(left).toEqual([
        { process_id: survivor.process.pid, kind: 'event-sender' },
        { process_id: survivor.process.pid, kind: 'graphile-worker' },
      ]);
      survivor.process.kill('SIGTERM');
      expect(await survivor.exited).toEqual({ code: 0, signal: null });
      expect((await t.database.pool.query('SELECT pool_id FROM webhook.worker_pools')).rows).toEqual([]);
      expect(survivor.output()).toContain('freed the work of a worker process that is gone');
    },
  );

  it(
    'a topic-based subscription keeps its event numbers across the kill -9 of a worker: each number names one event, gapless from 1, a resend carries the same one',
    { timeout: 150_000 },
    async () => {
      const t = await startTestApp();
      cleanups.push(() => t.close());
      await addTopics(t.database.db, [JSON.parse(readFileSync('examples/topics/encounter-complete.json', 'utf8'))]);
      // Event number and focus of each notification, in arrival order; slow answers keep the doomed process busy.
      const received: [number, string][] = [];
      const server: Server = createServer((request, response) => {
        const chunks: Buffer[] = [];
        request.on('data', (chunk: Buffer) => chunks.push(chunk));
        request.on('end', () => {
          const bundle = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Json;
          const [number] = eventNumbers(bundle);
          if (number !== undefined) received.push([number, String(bundle.entry[1].fullUrl).split('/').pop()!]);
          setTimeout(() => response.writeHead(200).end('ok'), 100);
        });
      });
      const { port, close } = await listenOnLoopback(server);
      cleanups.push(close);

      const doomed = spawnWorker(t.database.url);
      const ig = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';
      const created = await t.fhir('POST', '/Subscription', {
        resourceType: 'Subscription',
        status: 'requested',
        reason: 'kill -9',
        criteria: 'http://example.org/topics/encounter-complete',
        channel: {
          type: 'rest-hook',
          endpoint: `http://127.0.0.1:${port}/hook`,
          payload: 'application/fhir+json',
          _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'id-only' }] },
        },
      });
      expect(created.statusCode, created.body).toBe(201);
      const id = created.json<{ id: string }>().id;
      await untilStatus(t, id, 'active', 30_000);

      const count = 200;
      await t.database.pool.query(
        `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Encounter', 'id', 'killed-' || n, 'status', 'finished', 'class', jsonb_build_object('code', 'AMB'))
       FROM generate_series(1, $1::int) AS n`,
        [count],
      );
      await waitFor(async () => (received.length > 20 ? true : undefined), 30_000, 'the doomed process to be sending');
      doomed.process.kill('SIGKILL');
      expect(await doomed.exited).toEqual({ code: null, signal: 'SIGKILL' });
      const survivor = spawnWorker(t.database.url);
      await untilNothingPending(t, 60_000);

      // Every number from 1 to count, each naming one Encounter, every Encounter under one number.
      const byNumber = new Map<number, Set<string>>();
      for (const [number, focus] of received) byNumber.set(number, (byNumber.get(number) ?? new Set()).add(focus));
      expect([...byNumber.keys()].sort((a, b) => a - b)).toEqual(Array.from({ length: count }, (_, index) => index + 1));
      expect([...byNumber.values()].filter((foci) => foci.size !== 1)).toEqual([]);
      expect(new Set([...byNumber.values()].map((foci) => [...foci][0])).size).toBe(count);
      survivor.process.kill('SIGTERM');
      expect(await survivor.exited).toEqual({ code: 0, signal: null });
    },
  );
});
