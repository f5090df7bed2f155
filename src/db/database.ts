import { setTimeout as sleep } from 'node:timers/promises';
import { Kysely, PostgresDialect, type PostgresPool, type PostgresPoolClient, type PostgresQueryResult } from 'kysely';
import pg from 'pg';
import type { Database } from './schema.ts';

export type Db = Kysely<Database>;

/** A pg pool and the Kysely on it. */
export type DatabaseHandle = {
  connectionString: string;
  /**
   * The server itself, when connectionString is a transaction-mode pooler
   * (DATABASE_DIRECT_URL): where a session that must stay one connects (LISTEN,
   * graphile-worker, session locks). Undefined when connectionString is the server.
   */
  directConnectionString: string | undefined;
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
   * statement_timeout. Behind a transaction-mode pooler, Kysely's statements
   * get them per transaction (see settingsPerTransaction); the raw pool's do not.
   */
  settings?: Record<string, string>;
  /** What pg_stat_activity shows for the pool's sessions (application_name), to tell the pools apart; one in the URL wins. */
  applicationName?: string;
  /** Set when connectionString is a transaction-mode pooler: the server itself (see DatabaseHandle). */
  directConnectionString?: string;
};

export function connectDatabase(
  connectionString: string,
  onIdleError: (error: Error) => void,
  { maxConnections = 10, settings = {}, applicationName, directConnectionString }: PoolOptions = {},
): DatabaseHandle {
  const behindPooler = directConnectionString !== undefined;
  // Startup options set a session once, for all its transactions; a transaction-mode pooler has no such session.
  const options = behindPooler
    ? ''
    : Object.entries(settings)
        .map(([name, value]) => `-c ${name}=${value}`)
        .join(' ');
  // A server that is down or restarting makes a connection attempt fail within 5 s, rather than wait forever (pg's default):
  // the API answers 503 at once and the workers try again.
  const pool = new pg.Pool({
    connectionString,
    max: maxConnections,
    connectionTimeoutMillis: 5_000,
    application_name: applicationName,
    ...(options === '' ? {} : { options }),
  });
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
  const db = new Kysely<Database>({
    dialect: new PostgresDialect({ pool: behindPooler && Object.keys(settings).length > 0 ? settingsPerTransaction(pool, settings) : pool }),
  });
  return {
    connectionString,
    directConnectionString,
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
 * The pool as Kysely sees it behind a transaction-mode pooler, where a server
 * session serves this client for one transaction at a time: settings can be
 * neither startup options (PgBouncer refuses the options parameter, or drops
 * it when told to ignore it) nor a session's SET (it would stay on the server
 * connection for whichever client gets it next: an API write committing
 * asynchronously). Each transaction sets them itself, with SET LOCAL: one that
 * Kysely begins in the round trip of its BEGIN; a statement outside a
 * transaction in one of its own, BEGIN with the settings, the statement,
 * COMMIT (two more round trips, the price of the pooler).
 */
function settingsPerTransaction(pool: pg.Pool, settings: Record<string, string>): PostgresPool {
  const setLocal = Object.entries(settings)
    .map(([name, value]) => `SET LOCAL ${pg.escapeIdentifier(name)} = ${pg.escapeLiteral(value)}`)
    .join('; ');
  const wrap = (client: pg.PoolClient): PostgresPoolClient => {
    // A transaction begun here whose ROLLBACK failed may still be open: the client is then not reused.
    let broken = false;
    const send = <R>(sql: string, parameters: readonly unknown[] = []) => client.query(sql, [...parameters]) as unknown as Promise<PostgresQueryResult<R>>;
    const query = async <R>(sql: string, parameters: readonly unknown[]): Promise<PostgresQueryResult<R>> => {
      if (client.getTransactionStatus() !== 'I') return send(sql, parameters);
      // Kysely's BEGIN (or START TRANSACTION …) has no parameters: the settings go in the same simple query.
      const beginning = /^\s*(begin|start\s+transaction)\b/i.test(sql);
      try {
        if (beginning) return await send(`${sql}; ${setLocal}`);
        await send(`BEGIN; ${setLocal}`);
        const result = await send<R>(sql, parameters);
        await send('COMMIT');
        return result;
      } catch (error) {
        await send('ROLLBACK').catch(() => (broken = true));
        throw error;
      }
    };
    return {
      // Kysely passes a cursor instead of SQL only when its dialect is given a cursor class, as this one is not.
      query: query as PostgresPoolClient['query'],
      release: (destroy?: boolean) => client.release(destroy === true || broken),
    };
  };
  // Kysely keeps a connection per client object: one wrapper per pg client, for the client's life.
  const wrappers = new WeakMap<pg.PoolClient, PostgresPoolClient>();
  return {
    options: pool.options,
    connect: async () => {
      const client = await pool.connect();
      let wrapper = wrappers.get(client);
      if (wrapper === undefined) wrappers.set(client, (wrapper = wrap(client)));
      return wrapper;
    },
    end: () => pool.end(),
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
