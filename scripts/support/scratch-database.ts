import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { connectDatabase } from '../../src/db/database.ts';
import { applyMigrations } from '../../src/db/migrations.ts';

export type ScratchDatabase = { url: string; drop: () => Promise<void> };

/**
 * A migrated database of its own for a benchmark, on `serverUrl` (by default
 * DATABASE_URL's server) or, when it is null, on a throwaway embedded
 * PostgreSQL. drop() removes the database (and stops the embedded server).
 */
export async function createScratchDatabase(serverUrl: string | null = process.env.DATABASE_URL || null): Promise<ScratchDatabase> {
  const { serverUrlInUse, stop } = await server(serverUrl);
  const name = `fhir_webhooks_bench_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrlInUse });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(serverUrlInUse);
  url.pathname = `/${name}`;
  const drop = async () => {
    await admin.query(`DROP DATABASE ${name} WITH (FORCE)`);
    await admin.end();
    await stop();
  };
  const migrator = connectDatabase(url.toString(), (error) => console.error(error), { maxConnections: 2 });
  try {
    await applyMigrations(migrator.pool);
  } catch (error) {
    await migrator.pool.end();
    await drop();
    throw error;
  }
  await migrator.pool.end();
  return { url: url.toString(), drop };
}

async function server(serverUrl: string | null): Promise<{ serverUrlInUse: string; stop: () => Promise<void> }> {
  if (serverUrl) return { serverUrlInUse: serverUrl, stop: async () => undefined };
  const { startTemporaryEmbeddedPostgres } = await import('../../src/db/embedded.ts');
  const quiet = { info: () => undefined, debug: () => undefined, error: (message: string) => console.error(message) };
  const embedded = await startTemporaryEmbeddedPostgres(quiet);
  return { serverUrlInUse: embedded.adminUrl, stop: embedded.stop };
}
