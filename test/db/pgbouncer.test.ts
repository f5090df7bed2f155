import { spawn, spawnSync } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { connectDatabase } from '../../src/db/database.ts';
import { startService } from '../../src/service.ts';
import { testSecretsKey } from '../support/app.ts';
import { createTestDatabase, type TestDatabase } from '../support/database.ts';
import { databaseUrl, withAdmin } from '../support/global-setup.ts';
import { freePort, startReceiver, waitFor, type Receiver } from '../support/receiver.ts';

/**
 * The service behind a real PgBouncer (Debian's `pgbouncer` package) in
 * transaction mode, in front of the suite's PostgreSQL: DATABASE_URL through
 * PgBouncer, DATABASE_DIRECT_URL to the server for the sessions that need one
 * (the LISTENs; graphile-worker). Without the package outside CI, the suite is
 * skipped, saying so.
 */
const pgbouncerBinary = ['pgbouncer', '/usr/sbin/pgbouncer'].find((command) => spawnSync(command, ['--version']).status === 0);
if (pgbouncerBinary === undefined)
  console.warn(
    "No pgbouncer binary (Debian's pgbouncer package: apt-get install pgbouncer): outside CI the tests behind PgBouncer are skipped, in CI they fail.",
  );

/** PgBouncer's connections to the server for the test database: fewer than the service's clients, so that they take turns. */
const serverConnections = 4;
const apiKey = 'pgbouncer-test-key-0123456789';
const silent = pino({ level: 'silent' });

let database: TestDatabase;
/** A database with nothing applied yet, for the service to migrate. */
let emptyUrl: string;
let pgbouncerOutput = '';
/** PgBouncer's URL of each database: the migrated test database, and the empty one. */
let pooled: { database: string; empty: string };
const cleanups: (() => Promise<unknown>)[] = [];

describe.skipIf(pgbouncerBinary === undefined && process.env.CI === undefined)(
  "the service behind PgBouncer in transaction mode (Debian's pgbouncer package; skipped where it is missing, outside CI)",
  () => {
    beforeAll(async () => {
      database = await createTestDatabase();
      cleanups.push(() => database.drop());
      const empty = `${new URL(database.url).pathname.slice(1)}_empty`;
      await withAdmin(inject('adminUrl'), (admin) => admin.query(`CREATE DATABASE ${empty}`));
      cleanups.push(() => withAdmin(inject('adminUrl'), (admin) => admin.query(`DROP DATABASE IF EXISTS ${empty} WITH (FORCE)`)));
      emptyUrl = databaseUrl(inject('adminUrl'), empty);
      pooled = await startPgBouncer({ database: database.url, empty: emptyUrl });
    });
    afterAll(async () => {
      for (const cleanup of cleanups.reverse()) await cleanup();
    });

    it('refuses the startup options a pool sets its sessions with; behind it, a pool sets them in every transaction and leaves none on the server connections', async () => {
      const settings = { synchronous_commit: 'off', statement_timeout: '300ms' };
      // As the pools were before DATABASE_DIRECT_URL: settings as startup options.
      const unaware = connectDatabase(pooled.database, () => undefined, { settings });
      await expect(unaware.pool.query('SELECT 1')).rejects.toThrow('unsupported startup parameter: options');
      await unaware.close();

      const behind = connectDatabase(pooled.database, () => undefined, { settings, maxConnections: 3, directConnectionString: database.url });
      const plain = new pg.Pool({ connectionString: pooled.database, max: 3 });
      try {
        const setting = async (name: string) => (await sql<{ value: string }>`SELECT current_setting(${name}) AS value`.execute(behind.db)).rows[0]!.value;
        // Statements on their own, many at once over PgBouncer's few server connections, and in transactions.
        expect(new Set(await Promise.all(Array.from({ length: 20 }, () => setting('synchronous_commit'))))).toEqual(new Set(['off']));
        expect(await setting('statement_timeout')).toBe('300ms');
        const inTransaction = await behind.db.transaction().execute(async (transaction) => {
          await sql`SELECT 1`.execute(transaction);
          return (await sql<{ value: string }>`SELECT current_setting('synchronous_commit') AS value`.execute(transaction)).rows[0]!.value;
        });
        expect(inTransaction).toBe('off');
        await expect(sql`SELECT pg_sleep(2)`.execute(behind.db)).rejects.toThrow('canceling statement due to statement timeout');
        // A statement that failed in its own transaction left nothing open behind it.
        await expect(sql`SELECT 1 / 0`.execute(behind.db)).rejects.toThrow('division by zero');
        expect(await setting('synchronous_commit')).toBe('off');
        // Another client of the same server connections gets the server's defaults.
        const others = await Promise.all(
          Array.from({ length: 20 }, () => plain.query<{ value: string }>(`SELECT current_setting('synchronous_commit') AS value`)),
        );
        expect(new Set(others.map(({ rows }) => rows[0]!.value))).toEqual(new Set(['on']));
      } finally {
        await plain.end();
        await behind.close();
      }
    });

    it(
      'delivers through it: each subscription gets its handshake and every notification exactly once, its LISTENs on the server itself',
      { timeout: 120_000 },
      async () => {
        const config = loadConfig({
          DATABASE_URL: pooled.database,
          DATABASE_DIRECT_URL: database.url,
          SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'),
          BOOTSTRAP_API_KEY: apiKey,
          PORT: String(await freePort()),
          WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
          DATABASE_POOL_SIZE: '4',
          WORKER_DATABASE_POOL_SIZE: '4',
          WORKER_CONCURRENCY: '16',
        });
        const service = await startService(config, silent);
        cleanups.push(() => service.close());
        const fhir = (method: string, route: string, body: unknown) =>
          fetch(`${service.address}/fhir/resources${route}`, {
            method,
            headers: { 'x-api-key': apiKey, 'content-type': 'application/fhir+json' },
            body: JSON.stringify(body),
          });

        // The test's own statements, on a session of its own, straight to the server.
        const own = new pg.Client({ connectionString: database.url, application_name: testSessions });
        await own.connect();
        cleanups.push(() => own.end());
        // What the server's sessions for this database are, sampled while the service works.
        const sessions = sampleSessions(database.url);
        cleanups.push(async () => sessions.stop());

        const receivers: Receiver[] = [];
        const ids: string[] = [];
        for (const status of ['final', 'final,amended', 'final,preliminary']) {
          const receiver = await startReceiver();
          cleanups.push(() => receiver.close());
          receivers.push(receiver);
          const response = await fhir('POST', '/Subscription', {
            resourceType: 'Subscription',
            status: 'requested',
            criteria: `Observation?status=${status}`,
            reason: 'behind PgBouncer',
            channel: { type: 'rest-hook', endpoint: receiver.url, payload: 'application/fhir+json', header: ['secret: behind-pgbouncer'] },
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

        // Writes through the API (its pool behind PgBouncer), eight at a time, and one SQL statement of many rows.
        const throughApi = Array.from({ length: 40 }, (_, index) => `api-${index + 1}`);
        for (let start = 0; start < throughApi.length; start += 8) {
          const responses = await Promise.all(
            throughApi
              .slice(start, start + 8)
              .map((id) => fhir('PUT', `/Observation/${id}`, { resourceType: 'Observation', id, status: 'final', code: { text: id } })),
          );
          expect(responses.map((response) => response.status)).toEqual(responses.map(() => 201));
        }
        const bySql = 200;
        await own.query(
          `INSERT INTO fhir.resources (content)
         SELECT jsonb_build_object('resourceType', 'Observation', 'id', 'sql-' || n, 'status', 'final', 'code', jsonb_build_object('text', 'sql ' || n))
         FROM generate_series(1, $1::int) AS n`,
          [bySql],
        );
        const expected = [...throughApi, ...Array.from({ length: bySql }, (_, index) => `sql-${index + 1}`)].sort();
        for (const receiver of receivers) await receiver.waitForCalls(1 + expected.length, 60_000);
        // Anything sent twice would arrive within moments.
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        sessions.stop();

        for (const receiver of receivers) {
          const [handshake, ...notifications] = receiver.calls;
          expect(handshake!.json).toMatchObject({ resourceType: 'Bundle', type: 'history' });
          expect(notifications.map((call) => call.json.id as string).sort()).toEqual(expected);
        }
        const { rows: attempts } = await own.query(
          `SELECT kind, outcome, count(*)::int AS count FROM webhook.delivery_attempts WHERE subscription_id = ANY ($1) GROUP BY 1, 2 ORDER BY 1, 2`,
          [ids],
        );
        expect(attempts).toEqual([
          { kind: 'handshake', outcome: 'delivered', count: ids.length },
          { kind: 'notification', outcome: 'delivered', count: ids.length * expected.length },
        ]);

        // PgBouncer names the session that serves a client after it, with the client's address (application_name_add_host):
        // a session named exactly as the service names it came straight from the service.
        const direct = sessions.seen.filter((session) => directSession(session.name));
        expect(new Set(direct.map((session) => session.name))).toEqual(new Set(['fhir-webhooks event listener', 'fhir-webhooks job queue']));
        expect(direct.some((session) => session.name === 'fhir-webhooks event listener' && session.query.startsWith('LISTEN '))).toBe(true);
        expect(direct.some((session) => session.name === 'fhir-webhooks job queue' && session.query.startsWith('LISTEN "jobs:insert"'))).toBe(true);
        // The pools' sessions came through PgBouncer, at most its few server connections at a time.
        expect(sessions.seen.some((session) => session.name.startsWith('fhir-webhooks workers - '))).toBe(true);
        expect(sessions.seen.some((session) => session.name.startsWith('fhir-webhooks - '))).toBe(true);
        expect(sessions.mostThroughPgBouncer).toBeLessThanOrEqual(serverConnections);
        expect(pgbouncerOutput).not.toMatch(/ERROR|FATAL/);
      },
    );

    it('applies pending migrations on sessions of the server itself (they hold a session lock across transactions)', { timeout: 120_000 }, async () => {
      const sessions = sampleSessions(emptyUrl);
      cleanups.push(async () => sessions.stop());
      const config = loadConfig({
        DATABASE_URL: pooled.empty,
        DATABASE_DIRECT_URL: emptyUrl,
        SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'),
        BOOTSTRAP_API_KEY: apiKey,
        PORT: String(await freePort()),
      });
      const service = await startService(config, silent, { api: true, workers: false });
      await service.close();
      sessions.stop();
      expect(sessions.seen.filter((session) => session.name.startsWith('fhir-webhooks migrations')).map((session) => session.name)).toContain(
        'fhir-webhooks migrations',
      );
      expect(sessions.seen.filter((session) => session.name.startsWith('fhir-webhooks migrations - '))).toEqual([]);
      const check = new pg.Client({ connectionString: emptyUrl });
      await check.connect();
      const { rows } = await check.query<{ applied: number }>('SELECT count(*)::int AS applied FROM pgmigrations');
      await check.end();
      expect(rows[0]!.applied).toBeGreaterThan(20);
    });
  },
);

/**
 * Starts PgBouncer in transaction mode on a free loopback port, in front of
 * the server of `databases` (URLs by name), and returns the URL of each
 * through it. Run as root, it becomes `nobody` (PgBouncer refuses to run as
 * root), so its files are readable by all: a scratch folder, removed afterwards.
 */
async function startPgBouncer<Name extends string>(databases: Record<Name, string>): Promise<Record<Name, string>> {
  const port = await freePort();
  const dir = await mkdtemp(path.join(tmpdir(), 'pgbouncer-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  await chmod(dir, 0o755);
  const quote = (value: string) => `'${value.replaceAll("'", "''")}'`;
  const entry = (url: URL) =>
    [
      `host=${url.hostname}`,
      `port=${url.port || '5432'}`,
      `dbname=${url.pathname.slice(1)}`,
      `user=${decodeURIComponent(url.username)}`,
      ...(url.password === '' ? [] : [`password=${quote(decodeURIComponent(url.password))}`]),
    ].join(' ');
  const names = Object.keys(databases) as Name[];
  const ini = path.join(dir, 'pgbouncer.ini');
  await writeFile(
    ini,
    [
      '[databases]',
      ...names.map((name) => `${name} = ${entry(new URL(databases[name]))}`),
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      // Clients are not authenticated; every one logs in to the server as the [databases] entry's user.
      'auth_type = any',
      'pool_mode = transaction',
      `default_pool_size = ${serverConnections}`,
      'max_client_conn = 200',
      'application_name_add_host = 1',
      '',
    ].join('\n'),
    { mode: 0o644 },
  );
  const asRoot = process.getuid?.() === 0 ? ['-u', 'nobody'] : [];
  const child = spawn(pgbouncerBinary ?? 'pgbouncer', [...asRoot, ini], { stdio: ['ignore', 'pipe', 'pipe'] });
  const collect = (chunk: Buffer) => (pgbouncerOutput += chunk.toString());
  child.stdout.on('data', collect);
  child.stderr.on('data', collect);
  const exited = new Promise((resolve) => child.once('exit', resolve));
  cleanups.push(async () => {
    child.kill('SIGTERM');
    await exited;
  });
  await waitFor(
    () => {
      if (child.exitCode !== null) throw new Error(`PgBouncer exited with ${child.exitCode}:\n${pgbouncerOutput}`);
      return /listening on 127\.0\.0\.1/.test(pgbouncerOutput) ? true : undefined;
    },
    10_000,
    'PgBouncer',
  );
  return Object.fromEntries(names.map((name) => [name, `postgres://service@127.0.0.1:${port}/${name}`])) as Record<Name, string>;
}

type Session = { name: string; query: string };

/** The application_name of the test's own sessions. */
const testSessions = 'pgbouncer test';

/** Whether a session came from the service straight to the server: named as the service names its pools, without PgBouncer's suffix. */
const directSession = (name: string) => name.startsWith('fhir-webhooks') && !name.includes(' - ');

/**
 * Every 20 ms, the server's sessions on the test database: each distinct one
 * seen (name and last statement), and the most that PgBouncer held at once
 * (every session but the service's direct ones and the test's own).
 */
function sampleSessions(url: string): { seen: Session[]; mostThroughPgBouncer: number; stop(): void } {
  const sampler = new pg.Client({ connectionString: url, application_name: testSessions });
  const result = { seen: [] as Session[], mostThroughPgBouncer: 0, stop: () => undefined as void };
  const seen = new Map<string, Session>();
  let stopped = false;
  const sample = async () => {
    const { rows } = await sampler.query<Session>(
      `SELECT application_name AS name, query FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND application_name <> $1`,
      [testSessions],
    );
    for (const row of rows) seen.set(`${row.name}\u0000${row.query}`, row);
    result.seen = [...seen.values()];
    result.mostThroughPgBouncer = Math.max(result.mostThroughPgBouncer, rows.filter((row) => !directSession(row.name)).length);
  };
  const running = (async () => {
    await sampler.connect();
    while (!stopped) {
      await sample();
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await sampler.end();
  })();
  result.stop = () => {
    stopped = true;
    void running.catch(() => undefined);
  };
  return result;
}
