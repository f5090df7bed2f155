import { setTimeout as sleep } from 'node:timers/promises';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { Database } from './schema.ts';

export type Db = Kysely<Database>;

/** A pg pool and the Kysely on it. */
export type DatabaseHandle = {
  connectionString: string;
  pool: pg.Pool;
  db: Db;
  close(): Promise<void>;
};

/**
 * `asynchronousCommit` commits without waiting for the WAL flush
 * (synchronous_commit = off): a PostgreSQL crash may lose the last commits,
 * in order, never half of one. Only for writes that may be repeated.
 */
export function connectDatabase(connectionString: string, onIdleError: (error: Error) => void, maxConnections = 10, asynchronousCommit = false): DatabaseHandle {
  const pool = new pg.Pool({ connectionString, max: maxConnections, ...(asynchronousCommit ? { options: '-c synchronous_commit=off' } : {}) });
  // A client that loses its server (restart, failover) must not crash the process,
  // whether it is idle in the pool or checked out by graphile-worker.
  pool.on('error', onIdleError);
  pool.on('connect', (client) => client.on('error', onIdleError));
  // pool.end() resolves once it has asked each connection to close, not once they
  // have: close() waits for them, so that a server stopped right after (the
  // embedded PostgreSQL) has no session left to terminate.
  const connections = new Set<pg.PoolClient>();
  pool.on('connect', (client) => {
    connections.add(client);
    client.once('end', () => connections.delete(client));
  });
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  return {
    connectionString,
    pool,
    db,
    // Kysely's destroy() ends the pool only if Kysely has used it (it initialises its
    // driver lazily): a process that only migrated would otherwise wait ~10 s for the
    // pool's idle timeout before it could exit.
    close: async () => {
      await db.destroy();
      if (!pool.ending) await pool.end();
      await connectionsClosed(connections);
    },
  };
}

/**
 * Waits until every connection has ended, for at most a few seconds: a
 * connection to a server that went away may never say so.
 */
async function connectionsClosed(connections: Set<pg.PoolClient>, timeoutMs = 5_000): Promise<void> {
  const ended = Promise.all([...connections].map((client) => new Promise((resolve) => client.once('end', resolve))));
  await Promise.race([ended, sleep(timeoutMs, undefined, { ref: false })]);
}
