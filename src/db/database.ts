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

export type PoolOptions = {
  /** Default 10. */
  maxConnections?: number;
  /**
   * PostgreSQL settings of every session of the pool, such as
   * synchronous_commit = off (a crash may lose the last commits, in order,
   * never half of one: only for writes that may be repeated) or a
   * statement_timeout.
   */
  settings?: Record<string, string>;
};

export function connectDatabase(connectionString: string, onIdleError: (error: Error) => void, { maxConnections = 10, settings = {} }: PoolOptions = {}): DatabaseHandle {
  const options = Object.entries(settings)
    .map(([name, value]) => `-c ${name}=${value}`)
    .join(' ');
  // A server that is down or restarting makes a connection attempt fail within 5 s, rather than wait forever (pg's default):
  // the API answers 503 at once and the workers try again.
  const pool = new pg.Pool({ connectionString, max: maxConnections, connectionTimeoutMillis: 5_000, ...(options === '' ? {} : { options }) });
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

/** Runs `work` in `db` when it is a transaction already (a transaction Bundle's), else in a transaction of its own. */
export async function inTransaction<T>(db: Db, work: (transaction: Db) => Promise<T>): Promise<T> {
  return db.isTransaction ? work(db) : db.transaction().execute(work);
}
