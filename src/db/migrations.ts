import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { Logger, runMigrations as runGraphileWorkerMigrations } from 'graphile-worker';
import { runner } from 'node-pg-migrate';
import type pg from 'pg';

const migrationsDir = path.resolve(import.meta.dirname, '../../db/migrations');
const migrationsTable = 'pgmigrations';

/**
 * Installs or upgrades graphile-worker's schema (our triggers and transactions
 * enqueue jobs with its SQL functions), then applies every pending migration
 * in db/migrations. Safe to run from several processes at once (both lock).
 */
export async function applyMigrations(pool: pg.Pool, log: (message: string) => void = () => undefined): Promise<string[]> {
  await runGraphileWorkerMigrations({ pgPool: pool, logger: new Logger(() => (_level, message) => log(message)) });
  const client = await pool.connect();
  try {
    const applied = await runner({
      dbClient: client,
      dir: migrationsDir,
      direction: 'up',
      migrationsTable,
      count: Infinity,
      log,
    });
    return applied.map((migration) => migration.name);
  } finally {
    client.release();
  }
}

/** Names of the migrations in db/migrations that the database has not applied yet. */
export async function pendingMigrations(pool: pg.Pool): Promise<string[]> {
  const files = (await readdir(migrationsDir)).filter((file) => file.endsWith('.sql')).map((file) => file.slice(0, -4));
  const table = await pool.query<{ exists: boolean }>('SELECT to_regclass($1) IS NOT NULL AS exists', [migrationsTable]);
  if (!table.rows[0]?.exists) return files.sort();
  const { rows } = await pool.query<{ name: string }>(`SELECT name FROM ${migrationsTable}`);
  const applied = new Set(rows.map((row) => row.name));
  return files.filter((name) => !applied.has(name)).sort();
}
