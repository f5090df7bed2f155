import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { stripVTControlCharacters } from 'node:util';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { childEnvironment, cliEntry, removeStagedClusters, runCommand, startCommand, stopStartedCommands } from '../support/commands.ts';
import { freePort } from '../support/receiver.ts';

// A private parent (mode 0700, as mktemp -d and /root are): started by root, the
// embedded PostgreSQL's user cannot enter it, and the service must cope by itself.
const privateParent = await mkdtemp(path.join(tmpdir(), 'fhir-webhooks-cli-'));
// A checkout, as a newcomer's is: the data folder inside it must never show up in git status, whatever its name.
execFileSync('git', ['init', '--quiet', privateParent]);
const dataDir = path.join(privateParent, 'data');
afterAll(async () => {
  await stopStartedCommands();
  await rm(privateParent, { recursive: true, force: true });
  await removeStagedClusters(privateParent);
});

const port = await freePort();
const environment = childEnvironment({ EMBEDDED_DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'info' });
const cli = (...args: string[]) => runCommand('npm', ['run', '--silent', 'cli', '--', ...args], environment);

/** No stack traces and no dumped objects: errors are one message with its code. */
function expectNoDumps(output: string): void {
  expect(output).not.toMatch(/^\s+at /m);
  expect(output).not.toMatch(/\[Object|<ref \*|\b_events\b|Symbol\(/);
}

describe('npm start with no DATABASE_URL, as a newcomer runs it', () => {
  it('serves from a private folder, refuses a second start, lets the CLI share its database, and stops in order on Ctrl-C', { timeout: 120_000 }, async () => {
    const service = startCommand('npm', ['start'], environment);
    await service.waitFor(/Listening on/);
    const [, clusterDir] = /data in (\S+)\)/.exec(service.output())!;
    if (process.getuid?.() === 0) expect(clusterDir).toMatch(/^\/var\/lib\/fhir-webhooks\/fhir-webhooks-cli-\w+-[0-9a-f]{12}\/postgres$/);
    else expect(clusterDir).toBe(path.join(dataDir, 'postgres'));
    expect(service.output().match(/Listening on/g)).toHaveLength(1);

    // Its output is a pipe, not a terminal: the first key is in a file the log names, and how to get another
    // (on a terminal it is printed, with a curl line: test/auth/first-api-key.test.ts).
    const keyFile = path.join(dataDir, 'first-api-key');
    expect(service.output()).toContain(`wrote it to ${keyFile}`);
    expect(service.output()).toContain('npm run cli -- api-key create --name');
    const apiKey = readFileSync(keyFile, 'utf8').trim();
    expect(service.output()).not.toContain(apiKey);
    expect((await fetch(`http://127.0.0.1:${port}/fhir/resources/Subscription?_count=1`, { headers: { 'x-api-key': apiKey } })).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(200);
    // The password, the secrets key and the first key are in the data folder: git sees none of it.
    expect(execFileSync('git', ['-C', privateParent, 'status', '--porcelain', '--untracked-files=all'], { encoding: 'utf8' })).toBe('');

    const second = await runCommand('npm', ['start'], environment);
    expect(second.exitCode).toBe(2);
    expect(second.output).toContain(`port ${port} is in use: is the service already running? Set PORT to use another port.`);

    const migrate = await cli('migrate');
    expect(migrate).toEqual({ exitCode: 0, output: 'The database is up to date.\n' });

    const keys = await cli('api-key', 'list');
    expect(keys.exitCode).toBe(0);
    expect(keys.output).toMatch(/^ID\s+CREATED\s+STATE\s+SCOPES\s+NAME\n[0-9a-f-]{36}\s+\S+Z\s+active\s+read,write,admin\s+first start\n$/);

    const psql = await cli('psql', '-At', '-c', 'SELECT count(*) FROM webhook.api_keys');
    if (psqlInstalled()) expect(psql).toMatchObject({ exitCode: 0, output: expect.stringMatching(/^1$/m) });
    else expect(psql.output).toMatch(/psql is not installed here\. Connect with any PostgreSQL client to:\n\s+postgres:\/\//);

    const pidFile = path.join(clusterDir!, 'postmaster.pid');
    expect(existsSync(pidFile)).toBe(true);
    service.interrupt('SIGINT');
    expect(await service.exited).toBe(0);
    expect(service.output().trimEnd()).toMatch(/SIGINT received, stopping.*\n.*stopped"?\}?$/);
    expectNoDumps(service.output());
    expect(service.output()).not.toContain('57P01');
    // PostgreSQL removes its pid file as the last step of a clean shutdown.
    expect(existsSync(pidFile)).toBe(false);
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
  });
});

describe('npm start after the service was killed', () => {
  it('takes over the PostgreSQL the killed service left running, and stops it', { timeout: 60_000 }, async () => {
    const env = { ...environment, PORT: String(await freePort()) };
    const killed = startCommand('npm', ['start'], env);
    await killed.waitFor(/Listening on/);
    const [, clusterDir] = /data in (\S+)\)/.exec(killed.output())!;
    // postgres.owner: the pid of the process that runs the cluster, and its start time.
    const ownerPid = Number(readFileSync(path.join(dataDir, 'postgres.owner'), 'utf8').split(' ')[0]);
    expect(ownerPid).toBeGreaterThan(0);
    killed.interrupt('SIGKILL');
    await killed.exited;
    await vi.waitFor(() => expect(() => process.kill(ownerPid, 0)).toThrow(), { timeout: 10_000, interval: 20 });
    const pidFile = path.join(clusterDir!, 'postmaster.pid');
    expect(existsSync(pidFile)).toBe(true);

    const next = startCommand('npm', ['start'], env);
    await next.waitFor(/Listening on/);
    expect(next.output()).toContain(`Taking over the embedded PostgreSQL left running`);
    expect((await fetch(`http://127.0.0.1:${env.PORT}/readyz`)).status).toBe(200);
    next.interrupt('SIGINT');
    expect(await next.exited).toBe(0);
    expect(existsSync(pidFile)).toBe(false);
  });
});

describe('npm start in a terminal', () => {
  // util-linux's script(1) gives the service a pseudo-terminal; Ctrl-C is typed into it.
  // script runs its command with $SHELL -c; `exec` keeps that shell out of the way, since
  // dash (CI's /bin/sh) would itself die of the Ctrl-C and make script return 130.
  it.skipIf(!existsSync('/usr/bin/script') || process.platform !== 'linux')(
    'logs one readable line per event, and stops on a typed Ctrl-C',
    { timeout: 60_000 },
    async () => {
      const terminal = spawn('/usr/bin/script', ['--quiet', '--return', '--command', 'exec npm start', '/dev/null'], {
        env: { ...environment, PORT: String(await freePort()) },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let screen = '';
      terminal.stdout.on('data', (chunk: Buffer) => (screen += chunk.toString()));
      const exited = new Promise<number | null>((resolve) => terminal.once('close', resolve));
      await vi.waitFor(() => expect(screen).toContain('Listening on'), { timeout: 30_000, interval: 50 });
      terminal.stdin.write('\x03');
      expect(await exited).toBe(0);
      const lines = stripVTControlCharacters(screen).split(/\r?\n/);
      const readable = /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: /;
      expect(lines.find((line) => line.includes('Listening on'))).toMatch(readable);
      expect(lines.find((line) => line.includes('stopped'))).toMatch(readable);
      expect(screen).not.toContain('{"level"');
    },
  );
});

function psqlInstalled(): boolean {
  try {
    execFileSync('psql', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe('the CLI', () => {
  it.each([['--help'], ['-h'], ['help']])('%s prints the usage and exits 0', async (flag) => {
    const run = await cli(flag);
    expect(run.exitCode).toBe(0);
    expect(run.output).toMatch(/^Usage: npm run cli -- \[options\] \[command\]/);
    for (const command of ['serve', 'api', 'worker', 'migrate', 'api-key', 'psql']) expect(run.output).toContain(`\n  ${command} `);
  });

  it('has --help for each command', async () => {
    const run = await cli('api-key', 'create', '--help');
    expect(run.exitCode).toBe(0);
    expect(run.output).toContain('Usage: npm run cli -- api-key create [options]');
    expect(run.output).toContain('--name <name>');
  });

  it('says what is wrong with a command line, with the usage, and exits 2', async () => {
    const unknown = await cli('bogus');
    expect(unknown.exitCode).toBe(2);
    expect(unknown.output).toMatch(/^error: unknown command 'bogus'\n\nUsage:/);
    const missing = await cli('api-key', 'create');
    expect(missing.exitCode).toBe(2);
    expect(missing.output).toContain("error: required option '--name <name>' not specified");
  });

  it('reports a database it cannot reach in one line and exits 1', async () => {
    const closedPort = await freePort();
    const run = await runCommand('npm', ['run', '--silent', 'cli', '--', 'migrate'], {
      ...environment,
      DATABASE_URL: `postgres://postgres@127.0.0.1:${closedPort}/nothing`,
    });
    expect(run.exitCode).toBe(1);
    expect(run.output).toBe(`Failed: connect ECONNREFUSED 127.0.0.1:${closedPort} (ECONNREFUSED)\n`);
  });

  it('reports a bad configuration naming the variable and exits 2', async () => {
    const run = await runCommand('npm', ['run', '--silent', 'cli', '--', 'migrate'], { ...environment, PORT: 'eighty' });
    expect(run.exitCode).toBe(2);
    expect(run.output).toMatch(/^Invalid configuration:\n\s+PORT: /);
  });
});

describe('an older Node', () => {
  // The machine's system Node, when it is older than the project needs (Node 20 here).
  const oldNode = ['/usr/bin/node', '/usr/local/bin/node'].find((candidate) => {
    try {
      const [major, minor] = execFileSync(candidate, ['-p', 'process.versions.node']).toString().split('.').map(Number);
      return major! < 22 || (major === 22 && minor! < 18);
    } catch {
      return false;
    }
  });

  it.skipIf(oldNode === undefined)('is told in one line which Node is needed and how to get it', async () => {
    const run = await runCommand(oldNode!, ['--import', './scripts/require-node.js', cliEntry, 'serve'], environment);
    expect(run.exitCode).toBe(1);
    expect(run.output).toMatch(
      /^This project needs Node 22\.18 or newer \(24 recommended, see \.nvmrc\); this is Node \d+\.\d+\.\d+\. Get it with `nvm install`.*\n$/,
    );
  });
});
