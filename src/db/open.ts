import type { Logger } from 'pino';
import type { Config } from '../config/index.ts';
import { connectDatabase, type DatabaseHandle } from './database.ts';
import { applyMigrations, pendingMigrations } from './migrations.ts';

/**
 * Opening the service's database, for the service and for every one-shot
 * command (a load, a CLI query): the server (DATABASE_URL's, or the embedded
 * one), the migrations when some are pending, a pool. Nothing of the API or
 * the dispatcher: a command that needs only the database starts in a
 * fraction of the time the service takes.
 */

/** A PostgreSQL server to connect to, and how to let go of it. */
export type DatabaseServer = { url: string; release(): Promise<void> };

/**
 * DATABASE_URL's server, or the embedded PostgreSQL when it is unset: started
 * here (or shared with the `npm start` already running it), stopped by release().
 */
export async function databaseServer(config: Config, logger: Logger): Promise<DatabaseServer> {
  if (config.databaseUrl !== undefined) return { url: config.databaseUrl, release: async () => undefined };
  // Loaded only when used: production images need not ship the PostgreSQL binaries.
  const { startEmbeddedPostgres } = await import('./embedded.ts');
  const embedded = await startEmbeddedPostgres(config.embeddedDataDir, logger);
  return { url: embedded.url, release: () => embedded.stop() };
}

/**
 * Bounds on what one API request (or command) can hold in the database: a
 * statement (a search with a costly pattern) stops after 30 s, a wait for a
 * row lock after 5 s, a transaction left idle after 60 s; the client gets a
 * 503 (src/api/errors.ts) rather than a backend busy for minutes.
 */
const requestSessionSettings = { statement_timeout: '30s', lock_timeout: '5s', idle_in_transaction_session_timeout: '60s' };

/** Applies the pending migrations, on connections of their own: a migration may rightly run longer than a request may. */
export async function migrate(url: string, logger: Logger): Promise<string[]> {
  const migrator = connectDatabase(url, (error) => logger.warn({ err: error }, 'idle database connection failed'), { maxConnections: 2 });
  try {
    return await applyMigrations(migrator.pool, (message) => logger.debug(message));
  } finally {
    await migrator.close();
  }
}

/**
 * Connects to the database given by the configuration (see databaseServer)
 * and, when so configured, applies the migrations if one query finds some
 * pending. close() ends the pool, then stops what it started.
 */
export async function openDatabase(config: Config, logger: Logger): Promise<DatabaseHandle> {
  const server = await databaseServer(config, logger);
  try {
    // The API's requests; the workers have their own pool (src/dispatch/worker.ts).
    const database = connectDatabase(server.url, (error) => logger.warn({ err: error }, 'idle database connection failed'), { settings: requestSessionSettings });
    try {
      if (config.migrateOnStart && (await pendingMigrations(database.pool)).length > 0) {
        const applied = await migrate(server.url, logger);
        if (applied.length > 0) logger.info({ migrations: applied }, 'applied database migrations');
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
