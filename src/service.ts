import { rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { buildApp, fhirBasePath } from './api/app.ts';
import { apiKeyScopes, createApiKey, hasAnyApiKey, registerApiKey } from './auth/api-keys.ts';
import { makeDataDir } from './config/data-dir.ts';
import { ConfigError, type Config } from './config/index.ts';
import type { DatabaseHandle } from './db/database.ts';
import { pendingMigrations } from './db/migrations.ts';
import { openDatabase } from './db/open.ts';
import { startWorkers } from './dispatch/worker.ts';
import { serveMetrics } from './metrics/exposition.ts';
import { createMetrics } from './metrics/metrics.ts';
import { createSecretBox, secretsEncryptionKey } from './subscriptions/secrets.ts';
import { encryptEndpointCredentials } from './subscriptions/store.ts';

/** Something started that must be stopped, newest first, when the service stops. */
type Closer = () => Promise<unknown>;

export type Service = {
  /** The address the API listens on, e.g. http://127.0.0.1:8080, when it runs. */
  address: string | undefined;
  close(): Promise<void>;
};

/** What this process runs: `serve` both, `api` and `worker` one each. */
export type Roles = { api: boolean; workers: boolean };

/**
 * The pool of a process without the API (a `worker`): its start (pending
 * migrations, endpoints to encrypt) and the gauges /metrics reads, six short
 * queries a scrape, one after the other. Its workers have pools of their own
 * (src/dispatch/worker.ts).
 */
const workerProcessPoolSize = 1;

/** Starts the HTTP API on the configured address and the dispatcher's workers, as `roles` says. */
export async function startService(config: Config, logger: Logger, roles: Roles = { api: true, workers: true }): Promise<Service> {
  const secretsKey = await secretsEncryptionKey(config);
  // Before starting anything: a second `npm start` should say why at once.
  if (roles.api) await assertPortFree(config);
  const database = await openDatabase(config, logger, roles.api ? config.databasePoolSize : workerProcessPoolSize);
  const closers: Closer[] = [() => database.close()];
  try {
    await encryptStoredEndpointCredentials(database, secretsKey, logger);
    const metrics = createMetrics(database.db);
    if (config.metricsPort !== undefined) {
      const metricsServer = await serveMetrics(metrics, config.host, config.metricsPort);
      closers.push(() => metricsServer.close());
      logger.info(`Metrics on ${metricsServer.address}`);
    }
    if (roles.workers) {
      const workers = await startWorkers(config, database, secretsKey, logger, metrics);
      closers.push(() => workers.stop());
    }
    if (!roles.api) return { address: undefined, close: () => closeAll(closers) };
    await ensureApiKey(database, config, logger);
    const app: FastifyInstance = await buildApp({
      database,
      baseUrl: config.baseUrl,
      webhookNamingSystem: config.webhookNamingSystem,
      secretsEncryptionKey: secretsKey,
      logger,
      rateLimitPerMinute: config.apiRateLimitPerMinute,
      responseTimeoutMs: config.delivery.responseTimeoutMs,
      outbound: { delivery: config.delivery, oauth: config.oauth, metrics },
      websocket: config.websocket,
      // On the API's port unless METRICS_PORT gives them one of their own.
      ...(config.metricsPort === undefined ? { metrics } : {}),
    });
    closers.push(() => app.close());
    // Fastify logs the address, once: in the service's words.
    const address = await app.listen({ port: config.port, host: config.host, listenTextResolver: (at) => `Listening on ${at}` }).catch((error: unknown) => {
      throw isPortInUse(error) ? portInUse(config) : error;
    });
    return { address, close: () => closeAll(closers) };
  } catch (error) {
    await closeAll(closers);
    throw error;
  }
}

/**
 * Endpoints stored with their credentials before migration 0015 get them
 * encrypted, once that migration is applied (by this start or an earlier
 * `migrate`); until then they wait for a later start.
 */
async function encryptStoredEndpointCredentials(database: DatabaseHandle, secretsKey: Buffer, logger: Logger): Promise<void> {
  if ((await pendingMigrations(database.pool)).length > 0) {
    logger.warn('database migrations are pending: the service may not work until they are applied (npm run cli -- migrate)');
    return;
  }
  const encrypted = await encryptEndpointCredentials(database.db, createSecretBox(secretsKey));
  if (encrypted > 0) logger.info({ subscriptions: encrypted }, 'encrypted the credentials of endpoints stored before migration 0015');
}

/**
 * Registers BOOTSTRAP_API_KEY when given; on a first start with no key at all,
 * creates one, which cannot be recovered later: on a terminal it is shown
 * once; otherwise stdout is a log stream (a container's, kept by an
 * aggregator), so the key goes to a file only its owner can read, and the log
 * says where (firstApiKeyFile).
 */
async function ensureApiKey({ db }: DatabaseHandle, config: Config, logger: Logger): Promise<void> {
  if (config.bootstrapApiKey !== undefined) await registerApiKey(db, 'bootstrap', config.bootstrapApiKey);
  if (await hasAnyApiKey(db)) return;
  if (process.stdout.isTTY) {
    const { key } = await createApiKey(db, 'first start', apiKeyScopes);
    process.stdout.write(
      [
        '',
        `API key: ${key}`,
        'Keep it: it is stored only as a hash and is shown this once. Try:',
        `  curl -H 'x-api-key: ${key}' '${config.baseUrl}${fhirBasePath}/Subscription?_count=1'`,
        `Lost it? Make another with: ${makeAnotherKey}`,
        '',
        '',
      ].join('\n'),
    );
    return;
  }
  const file = firstApiKeyFile(config);
  try {
    // Written before the key's row commits: a key that could not be written is never made, and the next start tries again.
    await db.transaction().execute(async (transaction) => {
      const { key } = await createApiKey(transaction, 'first start', apiKeyScopes);
      await writeOwnerOnlyFile(file, `${key}\n`);
    });
  } catch (error) {
    logger.warn(
      { file, error },
      `no API key exists, and none was made: the first one could not be written to ${file}. ` + `Set BOOTSTRAP_API_KEY, or make one with: ${makeAnotherKey}`,
    );
    return;
  }
  logger.info(
    { file },
    `made the first API key and wrote it to ${file}, readable by its owner only. ` +
      `It is stored only as a hash: keep it elsewhere and delete the file. Lost it? Make another with: ${makeAnotherKey}`,
  );
}

const makeAnotherKey = 'npm run cli -- api-key create --name <name>';

/** Where a first start not on a terminal writes the key it made: beside the embedded data (with DATABASE_URL too). */
function firstApiKeyFile(config: Config): string {
  return path.resolve(config.embeddedDataDir, 'first-api-key');
}

/**
 * Writes a new file of mode 0600 in the data folder (made, git-ignored, if
 * missing). A file already there (a key of an earlier database) is removed
 * first: the mode applies only to a file created, and `wx` will not follow a
 * link planted in its place.
 */
async function writeOwnerOnlyFile(file: string, text: string): Promise<void> {
  await makeDataDir(path.dirname(file));
  await rm(file, { force: true });
  await writeFile(file, text, { mode: 0o600, flag: 'wx' });
}

function assertPortFree(config: Config): Promise<void> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (error) => reject(isPortInUse(error) ? portInUse(config) : error));
    probe.listen({ port: config.port, host: config.host, exclusive: true }, () => probe.close(() => resolve()));
  });
}

function isPortInUse(error: unknown): boolean {
  return (error as { code?: unknown }).code === 'EADDRINUSE';
}

function portInUse(config: Config): ConfigError {
  return new ConfigError(`port ${config.port} is in use: is the service already running? Set PORT to use another port.`);
}

/** Runs every closer, newest first, even when one fails. */
async function closeAll(closers: Closer[]): Promise<void> {
  const failures: unknown[] = [];
  for (const close of closers.splice(0).reverse()) {
    await close().catch((error: unknown) => failures.push(error));
  }
  if (failures.length > 0) throw new AggregateError(failures, 'some parts of the service failed to stop');
}
