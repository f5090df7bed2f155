import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';

const migrationsDir = path.resolve(import.meta.dirname, '../../db/migrations');
const functionsDir = path.resolve(import.meta.dirname, '../../db/functions');
const migrationsTable = 'pgmigrations';

/**
 * Held while the schema changes, so that of several processes starting at
 * once one migrates and the others wait, then find nothing to do. (Any
 * constant unlikely to be another application's: "fhirwebh" in ASCII.)
 */
const schemaLock = 0x6668_6972_7765_6268n;

/**
 * Installs or upgrades graphile-worker's schema (our triggers and transactions
 * enqueue jobs with its SQL functions), applies every pending migration in
 * db/migrations, then the functions and triggers of db/functions whose text
 * changed: all under one advisory lock. Returns what it applied.
 */
export async function applyMigrations(pool: pg.Pool, log: (message: string) => void = () => undefined): Promise<string[]> {
  // Loaded only when migrating: a command that finds nothing pending (pendingMigrations) does without them.
  const [{ Logger, runMigrations: runGraphileWorkerMigrations }, { runner }] = await Promise.all([import('graphile-worker'), import('node-pg-migrate')]);
  await runGraphileWorkerMigrations({ pgPool: pool, logger: new Logger(() => (_level, message) => log(message)) });
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [schemaLock]);
    try {
      const applied = await runner({
        dbClient: client,
        dir: migrationsDir,
        direction: 'up',
        migrationsTable,
        count: Infinity,
        log,
      });
      return [...applied.map((migration) => migration.name), ...(await applyFunctions(client, log))];
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [schemaLock]);
    }
  } finally {
    client.release();
  }
}

/** The files of db/functions, in the order they are applied (db/functions/README.md says why by name). */
export async function functionFiles(): Promise<{ file: string; text: string; sha256: string }[]> {
  const files = (await readdir(functionsDir)).filter((file) => file.endsWith('.sql')).sort();
  return Promise.all(
    files.map(async (file) => {
      const text = await readFile(path.join(functionsDir, file), 'utf8');
      return { file, text, sha256: createHash('sha256').update(text).digest('hex') };
    }),
  );
}

/** Applies each file of db/functions whose text differs from the one last applied, each with its record in one transaction. */
async function applyFunctions(client: pg.PoolClient, log: (message: string) => void): Promise<string[]> {
  const { rows } = await client.query<{ file: string; sha256: string }>('SELECT file, sha256 FROM webhook.applied_functions');
  const appliedText = new Map(rows.map((row) => [row.file, row.sha256]));
  const applied: string[] = [];
  for (const { file, text, sha256 } of await functionFiles()) {
    if (appliedText.get(file) === sha256) continue;
    await client.query('BEGIN');
    try {
      await client.query(text);
      await client.query(
        `INSERT INTO webhook.applied_functions (file, sha256) VALUES ($1, $2)
         ON CONFLICT (file) DO UPDATE SET sha256 = excluded.sha256, applied_at = now()`,
        [file, sha256],
      );
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK');
      throw new Error(`db/functions/${file}: ${(error as Error).message}`, { cause: error });
    }
    log(`applied db/functions/${file}`);
    applied.push(`functions/${file}`);
  }
  return applied;
}

/**
 * What applyMigrations applied, in a few words for a log line a person reads:
 * how many migrations (the first and last) and function files. The full list
 * stays in the line's fields.
 */
export function appliedSummary(applied: readonly string[]): string {
  const functions = applied.filter((name) => name.startsWith('functions/')).length;
  const migrations = applied.filter((name) => !name.startsWith('functions/'));
  const parts = [];
  if (migrations.length === 1) parts.push(`1 migration (${migrations[0]})`);
  if (migrations.length > 1) parts.push(`${migrations.length} migrations (${migrations[0]} to ${migrations.at(-1)})`);
  if (functions > 0) parts.push(`${functions} function file${functions === 1 ? '' : 's'}`);
  return parts.join(' and ');
}

/**
 * What the database has not applied yet: the migrations of db/migrations by
 * name, then the files of db/functions whose text changed (as functions/<file>).
 */
export async function pendingMigrations(pool: pg.Pool): Promise<string[]> {
  const migrations = (await readdir(migrationsDir)).filter((file) => file.endsWith('.sql')).map((file) => file.slice(0, -4));
  // One query: what a command pays to learn that nothing is pending. A database without the tables has applied nothing.
  const applied = await pool
    .query<{ migrations: string[]; functions: Record<string, string> }>(
      `SELECT (SELECT coalesce(array_agg(name), '{}') FROM ${migrationsTable}) AS migrations,
              (SELECT coalesce(json_object_agg(file, sha256), '{}') FROM webhook.applied_functions) AS functions`,
    )
    .then(
      ({ rows }) => rows[0]!,
      (error: unknown) => {
        if (error instanceof pg.DatabaseError && error.code === '42P01') return { migrations: [], functions: {} };
        throw error;
      },
    );
  const appliedMigrations = new Set(applied.migrations);
  const appliedFunctions = new Map(Object.entries(applied.functions));
  const changedFunctions = (await functionFiles()).filter(({ file, sha256 }) => appliedFunctions.get(file) !== sha256);
  return [...migrations.filter((name) => !appliedMigrations.has(name)).sort(), ...changedFunctions.map(({ file }) => `functions/${file}`)];
}
