import { existsSync } from 'node:fs';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { startTemporaryEmbeddedPostgres } from '../../src/db/embedded.ts';
import { applyMigrations } from '../../src/db/migrations.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A connection string to the test server's maintenance database (for CREATE DATABASE). */
    adminUrl: string;
    /** A database with every migration applied; each test file copies it. */
    templateDatabase: string;
  }
}

type Server = { adminUrl: string; stop: () => Promise<void> };

/**
 * Finds a real PostgreSQL for the suite: TEST_DATABASE_URL or DATABASE_URL when
 * set; else a testcontainers PostgreSQL when a Docker engine answers (unless
 * TEST_POSTGRES=embedded); else an embedded PostgreSQL in a temporary folder.
 * Then builds the migrated template.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const server = await findServer();
  const templateDatabase = `fhir_webhooks_template_${process.pid}`;
  try {
    await withAdmin(server.adminUrl, async (admin) => {
      await admin.query(`DROP DATABASE IF EXISTS ${templateDatabase}`);
      await admin.query(`CREATE DATABASE ${templateDatabase}`);
    });
    const pool = new pg.Pool({ connectionString: databaseUrl(server.adminUrl, templateDatabase) });
    const report = (error: Error) => console.error(error);
    pool.on('error', report);
    pool.on('connect', (client) => client.on('error', report));
    await applyMigrations(pool).finally(() => pool.end());
  } catch (error) {
    await server.stop();
    throw error;
  }

  project.provide('adminUrl', server.adminUrl);
  project.provide('templateDatabase', templateDatabase);
  return async () => {
    await withAdmin(server.adminUrl, (admin) => admin.query(`DROP DATABASE IF EXISTS ${templateDatabase}`));
    await server.stop();
  };
}

async function findServer(): Promise<Server> {
  const url = process.env.TEST_DATABASE_URL || process.env.DATABASE_URL;
  if (url) return { adminUrl: url, stop: async () => undefined };
  // TEST_POSTGRES=embedded skips Docker (the test of the test command needs the embedded server).
  const container = process.env.TEST_POSTGRES === 'embedded' ? undefined : await startContainerIfDockerAnswers();
  if (container) return container;
  const quiet = { info: () => undefined, debug: () => undefined, error: (message: string) => console.error(message) };
  const embedded = await startTemporaryEmbeddedPostgres(quiet);
  return { adminUrl: embedded.adminUrl, stop: embedded.stop };
}

async function startContainerIfDockerAnswers(): Promise<Server | undefined> {
  if (!process.env.DOCKER_HOST && !existsSync('/var/run/docker.sock')) return undefined;
  try {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:15-alpine').start();
    return { adminUrl: container.getConnectionUri(), stop: async () => void (await container.stop()) };
  } catch (error) {
    console.warn(`No usable Docker engine (${(error as Error).message}); using embedded PostgreSQL`);
    return undefined;
  }
}

export function databaseUrl(serverUrl: string, database: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

export async function withAdmin<T>(adminUrl: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}
