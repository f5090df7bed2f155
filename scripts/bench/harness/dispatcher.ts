import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { buildApp } from '../../../src/api/app.ts';
import { createApiKey } from '../../../src/auth/api-keys.ts';
import { connectDatabase, type DatabaseHandle } from '../../../src/db/database.ts';
import { loadConfig } from '../../../src/config/index.ts';
import { createSecretBox } from '../../../src/subscriptions/secrets.ts';
import type { SubscriptionContext } from '../../../src/subscriptions/store.ts';
import type { BenchReceiver } from '../../support/bench-receiver.ts';
import { peakRssKiB, resetPeakRss } from '../../support/process-stats.ts';
import { logger, secretsKey } from './run.ts';
import { freePort } from '../../support/waiting.ts';

/**
 * How a column runs the dispatcher: `worker` processes (`npm run cli --
 * worker`, as an operator runs them beside an API), the bench writing in SQL
 * and calling an API of its own; or one `serve` process (`npm start`: the API
 * and the workers in one process, as a newcomer runs it), the bench writing
 * single resources and Bundles through its API.
 */
export type ProcessKind = 'worker' | 'serve';

/** A resource a row writes, with the id its deliveries are checked by. */
export type WrittenResource = { resourceType: string; id: string; [element: string]: unknown };

/** The FHIR API a row writes Bundles through. */
export type Api = { postBundle: (body: object) => Promise<void>; close: () => Promise<void> };

/** The FHIR API on a port, at `origin` (http://127.0.0.1:…), for the clients that connect to it: websocket clients. */
export type ListeningApi = { origin: string; close: () => Promise<void> };

export type Bench = {
  kind: ProcessKind;
  database: DatabaseHandle;
  receiver: BenchReceiver;
  context: SubscriptionContext;
  dispatchers: number[];
  /** Writes one resource (with its id), as the column's writers do: an INSERT, or a PUT through the serve process's API. */
  writeOne: (resource: WrittenResource) => Promise<void>;
  /** The API the Bundle rows post to: in this process for `worker`, the serve process's for `serve`. */
  openApi: () => Promise<Api>;
  /** The API the websocket clients connect to: in this process (on a port of its own) for `worker`, the serve process's for `serve`. */
  openListeningApi: () => Promise<ListeningApi>;
  /** An API in this process, on a port of its own, whatever the column: a second API server beside the column's. */
  openOwnListeningApi: () => Promise<ListeningApi>;
};

/** The worker processes running now, by pid. */
const runningDispatchers = new Set<number>();
/** The peak RSS of the worker processes that ran in the row being measured, in KiB. */
let rowPeakRssKiB = 0;

/** Runs a row, with the peak RSS of the dispatcher processes that ran meanwhile (Linux's VmHWM), in KiB: 0 when none ran. */
export async function withPeakRss<T>(row: () => Promise<T>): Promise<{ result: T; peakRssKiB: number }> {
  rowPeakRssKiB = 0;
  for (const pid of runningDispatchers) resetPeakRss(pid);
  const result = await row();
  rowPeakRssKiB = Math.max(rowPeakRssKiB, ...[...runningDispatchers].map(peakRssKiB));
  return { result, peakRssKiB: rowPeakRssKiB };
}

/**
 * package.json's `cli` script: `npm run cli -- worker` runs it with `worker`
 * in a shell, and so does the bench (its `exec` makes the shell's pid the
 * worker's), with the same Node options as an operator's worker.
 */
const cliScript: string = (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { scripts: { cli: string } }).scripts.cli;

/** The dispatcher as the column runs it: one `worker` process, or one `serve` process (see withDispatcherProcesses). */
export function withDispatcher<T>(
  url: string,
  receiver: BenchReceiver,
  body: (bench: Bench) => Promise<T>,
  kind: ProcessKind = 'worker',
  settings: Record<string, string> = {},
): Promise<T> {
  return withDispatcherProcesses(url, receiver, { kind, processes: 1, settings }, body);
}

/** How the bench stores subscriptions, as the API would. */
const subscriptionContext: SubscriptionContext = {
  box: createSecretBox(secretsKey),
  baseUrl: 'http://localhost:8080',
  namingSystem: 'webhook',
  responseTimeoutMs: 15_000,
  retryPolicyBounds: loadConfig({}).delivery.retryPolicyBounds,
  brokers: {},
};

/**
 * `processes` dispatcher processes of the kind given (`npm run cli -- worker`
 * or `serve`, as an operator starts them) on the database, while `body`
 * subscribes and writes from this one; then SIGTERM, and their exit.
 */
export async function withDispatcherProcesses<T>(
  url: string,
  receiver: BenchReceiver,
  { kind, processes, settings = {} }: { kind: ProcessKind; processes: number; settings?: Record<string, string> },
  body: (bench: Bench) => Promise<T>,
): Promise<T> {
  const port = kind === 'serve' ? await freePort() : undefined;
  const apiKey = randomBytes(24).toString('hex');
  const environment = {
    ...process.env,
    DATABASE_URL: url,
    SECRETS_ENCRYPTION_KEY: secretsKey.toString('base64'),
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    MIGRATE_ON_START: 'false',
    LOG_LEVEL: 'warn',
    // The serve process's API: one key makes every request, so its per-key limit is lifted.
    ...(port === undefined ? {} : { PORT: String(port), HOST: '127.0.0.1', BOOTSTRAP_API_KEY: apiKey, API_RATE_LIMIT_PER_MINUTE: '100000000' }),
    ...settings,
  };
  const children = Array.from({ length: processes }, () =>
    spawn('/bin/sh', ['-c', `${cliScript} ${kind}`], { env: environment, stdio: ['ignore', 'inherit', 'inherit'] }),
  );
  const exited = children.map((child) => once(child, 'exit'));
  const pids = children.map((child) => child.pid!);
  for (const pid of pids) runningDispatchers.add(pid);
  const database = connectDatabase(url, (error) => logger.warn({ err: error }, 'idle connection failed'));
  const served = port === undefined ? undefined : await servedApi(port, apiKey);
  let result: T;
  let exitedEarly: string[];
  try {
    const insert = async (resource: object) => void (await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [JSON.stringify(resource)]));
    result = await body({
      kind,
      database,
      receiver,
      context: subscriptionContext,
      dispatchers: pids,
      writeOne: served?.put ?? insert,
      openApi: served === undefined ? () => apiInThisProcess(database) : async () => ({ postBundle: served.postBundle, close: async () => undefined }),
      openListeningApi:
        served === undefined ? () => listeningApiInThisProcess(database) : async () => ({ origin: served.origin, close: async () => undefined }),
      openOwnListeningApi: () => listeningApiInThisProcess(database),
    });
  } finally {
    await served?.close();
    // A process that exited during the row has no /proc entry left to read: the row fails below, naming it.
    exitedEarly = children
      .filter((child) => child.exitCode !== null || child.signalCode !== null)
      .map((child) => `${child.pid} (${child.exitCode ?? child.signalCode})`);
    const running = children.filter((child) => child.exitCode === null && child.signalCode === null).map((child) => child.pid!);
    rowPeakRssKiB = Math.max(rowPeakRssKiB, ...running.map(peakRssKiB));
    for (const pid of pids) runningDispatchers.delete(pid);
    for (const child of children) child.kill('SIGTERM');
    await Promise.all(exited);
    await database.close();
  }
  if (exitedEarly.length > 0) throw new Error(`a ${kind} process exited before the row's end: ${exitedEarly.join(', ')}`);
  return result;
}

/**
 * The serve process's FHIR API over HTTP, once its /healthz answers: PUT of
 * one resource by its id (update as create), POST of a Bundle; anything but
 * 2xx fails the run.
 */
async function servedApi(
  port: number,
  apiKey: string,
): Promise<{ origin: string; put: Bench['writeOne']; postBundle: Api['postBundle']; close: () => Promise<void> }> {
  const origin = `http://127.0.0.1:${port}`;
  const agent = new Agent({ connections: 16 });
  const deadline = Date.now() + 60_000;
  for (;;) {
    const answer = await request(`${origin}/healthz`, { dispatcher: agent }).catch(() => undefined);
    await answer?.body.dump();
    if (answer?.statusCode === 200) break;
    if (Date.now() > deadline) throw new Error('the serve process did not answer /healthz within 60 s');
    await sleep(100);
  }
  const send = async (method: 'PUT' | 'POST', path: string, body: object) => {
    const response = await request(`${origin}/fhir/resources/${path}`, {
      method,
      dispatcher: agent,
      headers: { 'x-api-key': apiKey, 'content-type': 'application/fhir+json' },
      body: JSON.stringify(body),
    });
    const text = await response.body.text();
    if (response.statusCode >= 300) throw new Error(`the serve process answered ${method} ${path} with ${response.statusCode}: ${text.slice(0, 300)}`);
  };
  return {
    origin,
    put: (resource) => send('PUT', `${resource.resourceType}/${resource.id}`, resource),
    postBundle: (body) => send('POST', '', body),
    close: () => agent.close(),
  };
}

/** The HTTP API in this process (Fastify's inject: no socket), with a key to call it: the `worker` columns' API. */
async function apiInThisProcess(database: DatabaseHandle): Promise<Api> {
  const app = await appInThisProcess(database);
  const { key } = await createApiKey(database.db, 'bench');
  return {
    postBundle: async (body) => {
      const response = await app.inject({
        method: 'POST',
        url: '/fhir/resources/Bundle',
        headers: { 'x-api-key': key, 'content-type': 'application/fhir+json' },
        payload: body,
      });
      if (response.statusCode !== 200) throw new Error(`the API answered ${response.statusCode}: ${response.body.slice(0, 300)}`);
    },
    close: () => app.close(),
  };
}

/** The HTTP API in this process on a loopback port of its own: the `worker` columns' websocket server, which a client reaches only by a socket. */
async function listeningApiInThisProcess(database: DatabaseHandle): Promise<ListeningApi> {
  const app = await appInThisProcess(database);
  const origin = await app.listen({ port: 0, host: '127.0.0.1' });
  return { origin, close: () => app.close() };
}

/** The HTTP API as the bench builds it in this process. */
function appInThisProcess(database: DatabaseHandle): ReturnType<typeof buildApp> {
  return buildApp({ database, baseUrl: 'http://localhost:8080', webhookNamingSystem: 'webhook', secretsEncryptionKey: secretsKey, logger });
}
