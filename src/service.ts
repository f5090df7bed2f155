import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { buildApp, fhirBasePath } from './api/app.ts';
import { createApiKey, hasAnyApiKey, registerApiKey } from './auth/api-keys.ts';
import { ConfigError, type Config } from './config/index.ts';
import { connectDatabase, type DatabaseHandle } from './db/database.ts';
import { applyMigrations } from './db/migrations.ts';
import { startWorkers } from './dispatch/worker.ts';
import { readOrCreateKeyFile } from './subscriptions/secrets.ts';

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
 * Connects to the database given by the configuration, or to an embedded
 * PostgreSQL when DATABASE_URL is unset. The returned close() stops what it started.
 */
export async function openDatabase(config: Config, logger: Logger): Promise<DatabaseHandle> {
  const closers: Closer[] = [];
  try {
    let url = config.databaseUrl;
    if (url === undefined) {
      // Loaded only when used: production images need not ship the PostgreSQL binaries.
      const { startEmbeddedPostgres } = await import('./db/embedded.ts');
      const embedded = await startEmbeddedPostgres(config.embeddedDataDir, logger);
      closers.push(() => embedded.stop());
      url = embedded.url;
    }
    // Every worker job may hold a connection, besides the API's requests.
    const database = connectDatabase(url, (error) => logger.warn({ err: error }, 'idle database connection failed'), config.delivery.concurrency + 10);
    closers.push(() => database.close());
    if (config.migrateOnStart) {
      const applied = await applyMigrations(database.pool, (message) => logger.debug(message));
      if (applied.length > 0) logger.info({ migrations: applied }, 'applied database migrations');
    }
    return { ...database, close: () => closeAll(closers) };
  } catch (error) {
    await closeAll(closers);
    throw error;
  }
}

/** Starts the HTTP API on the configured address and the dispatcher's workers, as `roles` says. */
export async function startService(config: Config, logger: Logger, roles: Roles = { api: true, workers: true }): Promise<Service> {
  const secretsKey = await secretsEncryptionKey(config);
  const database = await openDatabase(config, logger);
  const closers: Closer[] = [() => database.close()];
  try {
    if (roles.workers) {
      const workers = await startWorkers(config, database, secretsKey, logger);
      closers.push(() => workers.stop());
    }
    if (!roles.api) return { address: undefined, close: () => closeAll(closers) };
    await ensureApiKey(database, config);
    const app: FastifyInstance = await buildApp({
      database,
      baseUrl: config.baseUrl,
      webhookNamingSystem: config.webhookNamingSystem,
      secretsEncryptionKey: secretsKey,
      logger,
    });
    closers.push(() => app.close());
    const address = await app.listen({ port: config.port, host: config.host });
    return { address, close: () => closeAll(closers) };
  } catch (error) {
    await closeAll(closers);
    throw error;
  }
}

/**
 * SECRETS_ENCRYPTION_KEY, or with the embedded default a key made once and
 * kept beside the embedded data. A shared database without a key is refused:
 * a key made up per process would leave the stored secrets unreadable.
 */
async function secretsEncryptionKey(config: Config): Promise<Buffer> {
  if (config.secretsEncryptionKey) return config.secretsEncryptionKey;
  if (config.databaseUrl === undefined) return readOrCreateKeyFile(config.embeddedDataDir);
  throw new ConfigError(
    'SECRETS_ENCRYPTION_KEY is required with DATABASE_URL (it encrypts subscription headers at rest). ' +
      'Make one with: openssl rand -base64 32   (or: node -e "console.log(crypto.randomBytes(32).toString(\'base64\'))")',
  );
}

/**
 * Registers BOOTSTRAP_API_KEY when given; on a first start with no key at all,
 * creates one and shows it once on stdout, since it cannot be recovered later.
 */
async function ensureApiKey({ db }: DatabaseHandle, config: Config): Promise<void> {
  if (config.bootstrapApiKey !== undefined) await registerApiKey(db, 'bootstrap', config.bootstrapApiKey);
  if (await hasAnyApiKey(db)) return;
  const { key } = await createApiKey(db, 'first start');
  process.stdout.write(
    [
      '',
      `API key: ${key}`,
      'Keep it: it is stored only as a hash and is shown this once. Try:',
      `  curl -H 'x-api-key: ${key}' ${config.baseUrl}${fhirBasePath}/metadata`,
      '',
      '',
    ].join('\n'),
  );
}

/** Runs every closer, newest first, even when one fails. */
async function closeAll(closers: Closer[]): Promise<void> {
  const failures: unknown[] = [];
  for (const close of closers.splice(0).reverse()) {
    await close().catch((error: unknown) => failures.push(error));
  }
  if (failures.length > 0) throw new AggregateError(failures, 'some parts of the service failed to stop');
}
