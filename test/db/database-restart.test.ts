import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/api/app.ts';
import { createApiKey } from '../../src/auth/api-keys.ts';
import { loadConfig } from '../../src/config/index.ts';
import { connectDatabase, type DatabaseHandle } from '../../src/db/database.ts';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../../src/db/embedded.ts';
import { applyMigrations } from '../../src/db/migrations.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { baseUrl, testSecretsKey } from '../support/app.ts';
import { startReceiver, waitFor, type Receiver } from '../support/receiver.ts';
import { eventNumbers, statusValue } from '../support/backport-conformance.ts';
import { addTopics } from '../../src/topics/store.ts';

/**
 * A database restart under load, on a throwaway embedded PostgreSQL (never the
 * machine's shared server). The service reaches it through a TCP relay on a
 * fixed port, since a restarted embedded server listens on a new one.
 */

const quiet = { info: () => undefined, debug: () => undefined, error: () => undefined };
let dataDir: string;
let server: EmbeddedDatabase;
let relay: Server;
const relayed = new Set<Socket>();
let database: DatabaseHandle;
let workers: Workers;
let receiver: Receiver;
let app: Awaited<ReturnType<typeof buildApp>>;
let apiKey: string;

/** Forwards each connection to the server's current port; while it is down, the upstream connection fails and so does the client's. */
async function startRelay(): Promise<number> {
  relay = createServer((client) => {
    const upstream = connect(Number(new URL(server.url).port), '127.0.0.1');
    relayed.add(client).add(upstream);
    const close = () => {
      client.destroy();
      upstream.destroy();
      relayed.delete(client);
      relayed.delete(upstream);
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  return (relay.address() as { port: number }).port;
}

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), 'restart-test-'));
  server = await startEmbeddedPostgres(dataDir, quiet);
  const url = new URL(server.url);
  url.port = String(await startRelay());
  const migrator = connectDatabase(url.toString(), () => undefined, { maxConnections: 2 });
  await applyMigrations(migrator.pool);
  await migrator.close();
  database = connectDatabase(url.toString(), () => undefined);
  receiver = await startReceiver();
  app = await buildApp({ database, baseUrl, webhookNamingSystem: 'webhook', secretsEncryptionKey: testSecretsKey, logger: pino({ level: 'silent' }) });
  apiKey = (await createApiKey(database.db, 'restart')).key;
  // A topic on every Patient created, filterable by family: its subscribers' event numbers must survive the outage.
  await addTopics(database.db, [
    {
      resourceType: 'SubscriptionTopic',
      url: 'http://example.org/topics/patient-created',
      status: 'active',
      resourceTrigger: [{ resource: 'Patient', supportedInteraction: ['create'] }],
      canFilterBy: [{ filterParameter: 'family' }],
    },
  ]);
  workers = await startWorkers(
    loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_RETRY_DELAYS_MS: '500,1000,2000,4000', DELIVERY_MAX_FAILURES: '8' }),
    database,
    testSecretsKey,
    pino({ level: process.env.RESTART_TEST_LOG ?? 'silent' }),
  );
}, 120_000);

afterAll(async () => {
  await workers?.stop();
  await app?.close();
  await database?.close();
  for (const socket of relayed) socket.destroy();
  relay?.close();
  await receiver?.close();
  await server?.stop();
  await rm(dataDir, { recursive: true, force: true });
}, 120_000);

const fhir = (method: 'GET' | 'POST', url: string, body?: unknown) =>
  app.inject({
    method,
    url,
    headers: { 'x-api-key': apiKey, 'content-type': 'application/fhir+json' },
    ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
  });

/** Immediate shutdown (SIGQUIT): no checkpoint, backends killed at once, recovery from WAL on the next start; commits not yet flushed (the workers' asynchronous ones) are lost, as in a crash. */
async function crashServer(): Promise<void> {
  const pid = Number((await readFile(path.join(server.clusterDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
  process.kill(pid, 'SIGQUIT');
  await waitFor(
    () => {
      try {
        process.kill(pid, 0);
        return undefined;
      } catch {
        return true;
      }
    },
    30_000,
    'the crashed server gone',
  );
  await server.stop();
}

const outages = [
  { name: 'stopped (fast shutdown)', family: 'Restarted', takeDown: () => server.stop(), recovers: false },
  { name: "crashed (immediate shutdown, losing the workers' last asynchronous commits)", family: 'Crashed', takeDown: crashServer, recovers: true },
];

describe.each(outages)('PostgreSQL $name for a few seconds under load, then started again', ({ family, takeDown, recovers }) => {
  it(
    'answers 503 meanwhile within bounded time, /readyz tells the truth, both sides reconnect, and every committed event is delivered',
    { timeout: 180_000 },
    async () => {
      const created = await fhir('POST', '/fhir/resources/Subscription', {
        resourceType: 'Subscription',
        status: 'requested',
        criteria: `Patient?family=${family}`,
        reason: 'restart test',
        channel: { type: 'rest-hook', endpoint: receiver.url, payload: 'application/fhir+json', header: [`secret: ${family}`] },
      });
      expect(created.statusCode).toBe(201);
      const onTopic = await fhir('POST', '/fhir/resources/Subscription', {
        resourceType: 'Subscription',
        status: 'requested',
        criteria: 'http://example.org/topics/patient-created',
        _criteria: {
          extension: [
            { url: 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition/backport-filter-criteria', valueString: `Patient?family=${family}` },
          ],
        },
        reason: 'restart test',
        channel: {
          type: 'rest-hook',
          endpoint: receiver.url,
          payload: 'application/fhir+json',
          _payload: {
            extension: [{ url: 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition/backport-payload-content', valueCode: 'id-only' }],
          },
        },
      });
      expect(onTopic.statusCode, onTopic.body).toBe(201);
      const topicSubscriptionId = onTopic.json<{ id: string }>().id;
      // Events count from the activation, which commits after the handshake call returns: write only once it has.
      const subscriptionId = created.json<{ id: string }>().id;
      const status = async () =>
        (await database.pool.query<{ status: string }>('SELECT status FROM webhook.subscriptions WHERE id = $1', [subscriptionId])).rows[0]?.status;
      await waitFor(async () => ((await status()) === 'active' ? true : undefined), 30_000, 'the activation');
      await waitFor(
        async () =>
          (await database.pool.query(`SELECT 1 FROM webhook.subscriptions WHERE id = $1 AND status = 'active'`, [topicSubscriptionId])).rowCount === 1
            ? true
            : undefined,
        30_000,
        "the topic subscription's activation",
      );
      // Slow answers, so that the outage catches jobs in flight: their completions fail with the connection.
      receiver.answer = () => ({ status: 200, delayMs: 300 });

      const committed: string[] = [];
      const answers: { status: number; ms: number; phase: string }[] = [];
      const readiness: { status: number; phase: string }[] = [];
      let phase = 'before';
      let writing = true;
      const writer = (async () => {
        for (let n = 0; writing; n++) {
          const started = performance.now();
          const response = await fhir('POST', '/fhir/resources/Patient', { resourceType: 'Patient', active: true, name: [{ family, given: [`writer ${n}`] }] });
          answers.push({ status: response.statusCode, ms: performance.now() - started, phase });
          if (response.statusCode === 201) committed.push(response.json<{ id: string }>().id);
          readiness.push({ status: (await app.inject({ method: 'GET', url: '/readyz' })).statusCode, phase });
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      })();

      await waitFor(() => (committed.length >= 10 ? true : undefined), 30_000, 'writes before');
      phase = 'down';
      await takeDown();
      await new Promise((resolve) => setTimeout(resolve, 6_000));
      server = await startEmbeddedPostgres(dataDir, quiet);
      phase = 'after';
      // The crash was one: the server started again by recovering from its WAL.
      const serverLog = await readFile(path.join(path.dirname(server.clusterDir), 'postgres.log'), 'utf8');
      expect(serverLog.includes('automatic recovery in progress')).toBe(recovers);
      const committedBeforeRestart = committed.length;
      await waitFor(() => (committed.length >= committedBeforeRestart + 10 ? true : undefined), 60_000, 'writes after the restart');
      writing = false;
      await writer;

      // Meanwhile: 503 OperationOutcomes, each within a bounded time; never a 5xx other than 503, never a hang.
      const down = answers.filter((answer) => answer.phase === 'down');
      expect(down.some((answer) => answer.status === 503)).toBe(true);
      expect(answers.filter((answer) => answer.status !== 201 && answer.status !== 503)).toEqual([]);
      expect(Math.max(...answers.map((answer) => answer.ms))).toBeLessThan(15_000);
      // /readyz: ready before, not ready while down, ready again after.
      expect(readiness.filter((entry) => entry.phase === 'before').every((entry) => entry.status === 200)).toBe(true);
      expect(readiness.filter((entry) => entry.phase === 'down').some((entry) => entry.status === 503)).toBe(true);
      expect(readiness.at(-1)!.status).toBe(200);

      // Every event committed before, during (none) or after the outage arrives.
      const delivered = () => new Set(receiver.calls.map((call) => call.json.id as string));
      await waitFor(() => (committed.every((id) => delivered().has(id)) ? true : undefined), 90_000, 'every committed event delivered').catch(
        async (error: unknown) => {
          // What is left, for whoever debugs it: the missing resources and the jobs and locks in the database.
          const missing = committed.filter((id) => !delivered().has(id));
          const jobs = await database.pool.query('SELECT id, locked_by, locked_at, attempts, run_at, last_error, payload FROM graphile_worker._private_jobs');
          const queues = await database.pool.query('SELECT * FROM graphile_worker._private_job_queues');
          const attempts = await database.pool.query('SELECT resource_id, outcome, error FROM webhook.delivery_attempts WHERE resource_id = ANY($1)', [
            missing,
          ]);
          const stored = await database.pool.query(`SELECT id FROM fhir.resources WHERE resource_type = 'Patient' AND id = ANY($1)`, [missing]);
          throw new Error(
            `${String(error)}: missing ${JSON.stringify(missing)} (stored after the restart: ${JSON.stringify(stored.rows)}); jobs ${JSON.stringify(jobs.rows)}; queues ${JSON.stringify(queues.rows)}; attempts ${JSON.stringify(attempts.rows)}`,
          );
        },
      );

      // The topic-based subscription: every committed Patient under one event number, the numbers 1 to N without a gap, a number never naming two.
      const byNumber = new Map<number, Set<string>>();
      const subscriptionOf = (call: { json: Record<string, unknown> }) =>
        (statusValue(call.json, 'subscription') as { reference?: string } | undefined)?.reference ?? '';
      const topicNotifications = () => receiver.calls.filter((call) => subscriptionOf(call).endsWith(topicSubscriptionId));
      await waitFor(
        () => {
          byNumber.clear();
          for (const call of topicNotifications()) {
            const [number] = eventNumbers(call.json);
            if (number !== undefined)
              byNumber.set(number, (byNumber.get(number) ?? new Set()).add((call.json.entry as { fullUrl: string }[])[1]!.fullUrl.split('/').pop()!));
          }
          return byNumber.size >= committed.length ? true : undefined;
        },
        90_000,
        'every committed Patient notified to the topic-based subscription',
      );
      expect([...byNumber.keys()].sort((a, b) => a - b)).toEqual(Array.from({ length: committed.length }, (_, index) => index + 1));
      expect([...byNumber.values()].filter((ids) => ids.size !== 1)).toEqual([]);
      expect(new Set([...byNumber.values()].map((ids) => [...ids][0])).size).toBe(committed.length);
    },
  );
});
