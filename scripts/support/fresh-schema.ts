import pg from 'pg';
import { startTemporaryEmbeddedPostgres } from '../../src/db/embedded.ts';
import { applyMigrations } from '../../src/db/migrations.ts';
import { dumpSchema } from '../../src/db/schema-dump.ts';

/** The schema text (src/db/schema-dump.ts) of a new database on a throwaway embedded PostgreSQL, migrated. */
export async function schemaOfFreshDatabase(): Promise<string> {
  const quiet = { info: () => undefined, debug: () => undefined, error: (message: string) => console.error(message) };
  const server = await startTemporaryEmbeddedPostgres(quiet);
  try {
    const url = new URL(server.adminUrl);
    const admin = new pg.Client({ connectionString: url.toString() });
    await admin.connect();
    await admin.query('CREATE DATABASE schema_dump');
    await admin.end();
    url.pathname = '/schema_dump';
    const pool = new pg.Pool({ connectionString: url.toString() });
    pool.on('error', () => undefined);
    pool.on('connect', (client) => client.on('error', () => undefined));
    try {
      await applyMigrations(pool);
      return await dumpSchema(pool);
    } finally {
      await pool.end();
    }
  } finally {
    await server.stop();
  }
}
