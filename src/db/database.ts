import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { Database } from './schema.ts';

export type Db = Kysely<Database>;

/** One pg pool, shared by Kysely and (later) graphile-worker and the migrator. */
export type DatabaseHandle = {
  pool: pg.Pool;
  db: Db;
  close(): Promise<void>;
};

export function connectDatabase(connectionString: string, onIdleError: (error: Error) => void, maxConnections = 10): DatabaseHandle {
  const pool = new pg.Pool({ connectionString, max: maxConnections });
  // A client that loses its server (restart, failover) must not crash the process,
  // whether it is idle in the pool or checked out by graphile-worker.
  pool.on('error', onIdleError);
  pool.on('connect', (client) => client.on('error', onIdleError));
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  return {
    pool,
    db,
    // Kysely's destroy() ends the pool it was given.
    close: () => db.destroy(),
  };
}
