import type { Logger } from 'pino';
import type { Config } from '../config/index.ts';
import { connectDatabase, type DatabaseHandle } from './database.ts';
import { appliedSummary, applyMigrations, pendingMigrations } from './migrations.ts';

/**
 * Opening the service's database, for the service and for every one-shot
 * command (a load, a CLI query): the server (DATABASE_URL's, or the embedded
 * one), the migrations when some are pending, a pool. Nothing of the API or
 * the dispatcher: a command that needs only the database starts in a
 * fraction of the time the service takes.
 */

/**
 * A PostgreSQL server to connect to, and how to let go of it. `url` is the
 * server itself, for sessions (migrations, psql); `poolerUrl`, when set, a
 * transaction-mode pooler in front of it, for the pools' short transactions.
 */
export type DatabaseServer = { url: string; poolerUrl: string | undefined; release(): Promise<void> };

/**
 * DATABASE_URL's server (DATABASE_DIRECT_URL's, when DATABASE_URL is a pooler
 * in front of it), or the embedded PostgreSQL when it is unset: started here
 * (or shared with the `npm start` already running it), stopped by release().
 */
export async function databaseServer(config: Config, logger: Logger): Promise<DatabaseServer> {
  if (config.databaseUrl !== undefined) {
    if (config.databaseDirectUrl === undefined) return { url: config.databaseUrl, poolerUrl: undefined, release: async () => undefined };
    return { url: config.databaseDirectUrl, poolerUrl: config.databaseUrl, release: async () => undefined };
  }
  // Loaded only when used: production images need not ship the PostgreSQL binaries.
  const { startEmbeddedPostgres } = await import('./embedded.ts');
  const embedded = await startEmbeddedPostgres(config.embeddedDataDir, logger);
  return { url: embedded.url, poolerUrl: undefined, release: () => embedded.stop() };
}

/**
 * Bounds on what one API request (or command) can hold in the database: a
 * statement (a search with a costly pattern) stops after 30 s, a wait for a
 * row lock after 5 s, a transaction left idle after 60 s; the client gets a
 * 503 (src/api/errors.ts) rather than a backend busy for minutes.
 */
const requestSessionSettings = { statement_timeout: '30s', lock_timeout: '5s', idle_in_transaction_session_timeout: '60s' };

/** The migrations' pool: graphile-worker's schema on one connection, then ours on one that holds the schema lock. */
const migrationConnections = 2;

/**
 * Applies the pending migrations, on connections of their own to the server
 * itself (`url`: never a transaction-mode pooler, since they hold a session's
 * advisory lock across transactions): a migration may rightly run longer than
 * a request may.
 */
export async function migrate(url: string, logger: Logger): Promise<string[]> {
  const migrator = connectDatabase(url, (error) => logger.warn({ err: error }, 'idle database connection failed'), {
    maxConnections: migrationConnections,
    applicationName: 'fhir-webhooks migrations',
  });
  try {
    return await applyMigrations(migrator.pool, (message) => logger.debug(message));
  } finally {
    await migrator.close();
  }
}

/**
 * Connects to the database given by the configuration (see databaseServer),
 * through its pooler when it has one, with a pool of `maxConnections`
 * (DATABASE_POOL_SIZE unless the caller needs fewer) and, when so configured,
 * applies the migrations if one query finds some pending. close() ends the
 * pool, then stops what it started.
 */
export async function openDatabase(config: Config, logger: Logger, maxConnections = config.databasePoolSize): Promise<DatabaseHandle> {
  const server = await databaseServer(config, logger);
  try {
    // The API's requests; the workers have their own pools (src/dispatch/worker.ts).
    const database = connectDatabase(server.poolerUrl ?? server.url, (error) => logger.warn({ err: error }, 'idle database connection failed'), {
      maxConnections,
      settings: requestSessionSettings,
      applicationName: 'fhir-webhooks',
      directConnectionString: server.poolerUrl === undefined ? undefined : server.url,
    });
    try {
      if (config.migrateOnStart && (await pendingMigrations(database.pool)).length > 0) {
        const applied = await migrate(server.url, logger);
        if (applied.length > 0) logger.info({ migrations: applied }, `applied database migrations: ${appliedSummary(applied)}`);
      }
    } catch (error) {
      await database.close();
      throw error;
    }
    return {
      ...database,
      close: async () => {
        try {
          await database.close();
        } finally {
          await server.release();
        }
      },
    };
  } catch (error) {
    await server.release();
    throw error;
  }
}
