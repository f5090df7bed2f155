import { createServer } from 'node:http';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { testSecretsKey } from '../support/app.ts';
import { childEnvironment, cliEntry, startCommand, stopStartedCommands, type Running } from '../support/commands.ts';
import { createTestDatabase } from '../support/database.ts';
import { freePort, listenOnLoopback, waitFor } from '../support/receiver.ts';

/**
 * The connections each kind of process opens, held to the formula
 * docs/operators.md gives an operator ("Connections to PostgreSQL"): a
 * `serve`, an `api` and two `worker` processes, as an operator starts them,
 * with small pools, while they deliver a few thousand calls and take API
 * writes; the server's sessions of each process sampled every 10 ms.
 */

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  await stopStartedCommands();
  for (const cleanup of cleanups.reverse()) await cleanup();
});

const poolSize = 3;
const workerPoolSize = 2;
/** The most connections a process of each kind opens, as docs/operators.md says (no migration pending at its start). */
const most = {
  api: poolSize,
  worker: workerPoolSize + 4,
  serve: poolSize + workerPoolSize + 3,
};
const apiKey = 'connection-sizing-key-0123456789';

describe('the connections of each kind of process', () => {
  it('stay within the documented formula under load, every pool of the workers filled', { timeout: 120_000 }, async () => {
    const database = await createTestDatabase();
    cleanups.push(() => database.drop());

    // One receiver for every subscription: the path names the subscriber.
    const received = new Map<string, string[]>();
    const server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        const json = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceType: string; id: string };
        if (json.resourceType === 'Observation') {
          const ids = received.get(request.url!) ?? [];
          received.set(request.url!, ids);
          ids.push(json.id);
        }
        response.writeHead(200).end();
      });
    });
    const receiver = await listenOnLoopback(server);
    cleanups.push(receiver.close);

    // Each process names its sessions (application_name in its URL, which wins over the service's names for its pools).
    const start = async (
      kind: keyof typeof most,
      name: string,
      extra: NodeJS.ProcessEnv = {},
    ): Promise<{ name: string; kind: keyof typeof most; command: Running }> => {
      const url = new URL(database.url);
      url.searchParams.set('application_name', name);
      const command = startCommand(process.execPath, [cliEntry, kind], {
        ...childEnvironment({
          DATABASE_URL: url.toString(),
          SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'),
          BOOTSTRAP_API_KEY: apiKey,
          WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
          DATABASE_POOL_SIZE: String(poolSize),
          WORKER_DATABASE_POOL_SIZE: String(workerPoolSize),
          WORKER_CONCURRENCY: '16',
          LOG_LEVEL: 'info',
          ...extra,
        }),
      });
      await command.waitFor(kind === 'worker' ? /Workers running/ : /Listening on/);
      return { name, kind, command };
    };

    // The test's own statements, and the sampling, each on a session of its own.
    const own = new pg.Client({ connectionString: database.url, application_name: 'connection sizing test' });
    await own.connect();
    cleanups.push(() => own.end());
    // Sampling starts before the processes do: their starts count too.
    const sampler = new pg.Client({ connectionString: database.url, application_name: 'connection sampler' });
    await sampler.connect();
    cleanups.push(() => sampler.end());
    const peaks = new Map<string, number>();
    let sampling = true;
    const samples = (async () => {
      while (sampling) {
        const { rows } = await sampler.query<{ name: string; sessions: number }>(
          `SELECT application_name AS name, count(*)::int AS sessions FROM pg_stat_activity WHERE datname = current_database() GROUP BY 1`,
        );
        for (const { name, sessions } of rows) peaks.set(name, Math.max(peaks.get(name) ?? 0, sessions));
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    cleanups.push(async () => {
      sampling = false;
      await samples;
    });

    const apiPort = await freePort();
    const servePort = await freePort();
    const workerMetricsPorts = [await freePort(), await freePort()];
    const processes = await Promise.all([
      start('serve', 'sizing serve', { PORT: String(servePort) }),
      start('api', 'sizing api', { PORT: String(apiPort) }),
      start('worker', 'sizing worker 1', { METRICS_PORT: String(workerMetricsPorts[0]) }),
      start('worker', 'sizing worker 2', { METRICS_PORT: String(workerMetricsPorts[1]) }),
    ]);
    const fhir = (port: number, method: string, route: string, body: unknown) =>
      fetch(`http://127.0.0.1:${port}/fhir/resources${route}`, {
        method,
        headers: { 'x-api-key': apiKey, 'content-type': 'application/fhir+json' },
        body: JSON.stringify(body),
      });

    const subscribers = ['final', 'final,amended', 'final,preliminary', 'final,cancelled'].map((status, index) => ({ status, path: `/hook/${index}` }));
    const ids: string[] = [];
    for (const { status, path } of subscribers) {
      const response = await fhir(apiPort, 'POST', '/Subscription', {
        resourceType: 'Subscription',
        status: 'requested',
        criteria: `Observation?status=${status}`,
        reason: 'connection sizing',
        channel: { type: 'rest-hook', endpoint: `http://127.0.0.1:${receiver.port}${path}`, payload: 'application/fhir+json', header: ['secret: sizing'] },
      });
      expect(response.status).toBe(201);
      ids.push(((await response.json()) as { id: string }).id);
    }
    await waitFor(
      async () => {
        const { rows } = await own.query<{ active: number }>(
          `SELECT count(*)::int AS active FROM webhook.subscriptions WHERE id = ANY ($1) AND status = 'active'`,
          [ids],
        );
        return rows[0]!.active === ids.length ? true : undefined;
      },
      30_000,
      'the handshakes',
    );

    // The load: one statement of many rows; meanwhile writes through both APIs, ten at a time each, and the workers' /metrics scraped.
    const bySql = 400;
    const written = own.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Observation', 'id', 'sql-' || n, 'status', 'final', 'code', jsonb_build_object('text', 'sql ' || n))
       FROM generate_series(1, $1::int) AS n`,
      [bySql],
    );
    const throughApi = async (port: number, prefix: string) => {
      const resources = Array.from({ length: 60 }, (_, index) => `${prefix}-${index + 1}`);
      for (let first = 0; first < resources.length; first += 10) {
        const responses = await Promise.all(
          resources
            .slice(first, first + 10)
            .map((id) => fhir(port, 'PUT', `/Observation/${id}`, { resourceType: 'Observation', id, status: 'final', code: { text: id } })),
        );
        expect(responses.map((response) => response.status)).toEqual(responses.map(() => 201));
      }
      return resources;
    };
    let scraping = true;
    const scrapes = (async () => {
      while (scraping) {
        await Promise.all(workerMetricsPorts.map((port) => fetch(`http://127.0.0.1:${port}/metrics`).then((response) => response.text())));
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    })();
    const [, viaApi, viaServe] = await Promise.all([written, throughApi(apiPort, 'api'), throughApi(servePort, 'serve')]);
    const expected = [...Array.from({ length: bySql }, (_, index) => `sql-${index + 1}`), ...viaApi, ...viaServe].sort();
    await waitFor(
      () => (subscribers.every(({ path }) => (received.get(path)?.length ?? 0) >= expected.length) ? true : undefined),
      60_000,
      `${subscribers.length * expected.length} deliveries`,
    );
    scraping = false;
    await scrapes;
    sampling = false;
    await samples;

    for (const { path } of subscribers) expect(received.get(path)!.sort()).toEqual(expected);
    const measured = processes.map(({ name, kind }) => ({ name, sessions: peaks.get(name) ?? 0, formula: most[kind] }));
    console.log(`most sessions at once: ${measured.map(({ name, sessions, formula }) => `${name} ${sessions} (formula ${formula})`).join(', ')}`);
    expect(measured.filter(({ sessions, formula }) => sessions > formula)).toEqual([]);
    // The load filled what it may: each worker process its pool, graphile-worker's LISTEN and the event sender's.
    for (const { name, kind } of processes.filter((started) => started.kind === 'worker')) expect(peaks.get(name), name).toBeGreaterThanOrEqual(most[kind] - 2);

    for (const { command } of processes) command.interrupt('SIGTERM');
    expect(await Promise.all(processes.map(({ command }) => command.exited))).toEqual([0, 0, 0, 0]);
  });
});
