import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { testSecretsKey } from '../support/app.ts';
import { childEnvironment, cliEntry, startCommand, stopStartedCommands } from '../support/commands.ts';
import { createTestDatabase, type TestDatabase } from '../support/database.ts';
import { databaseUrl, withAdmin } from '../support/global-setup.ts';
import { freePort } from '../support/receiver.ts';

/**
 * The key a first start makes, through a real `serve` process: on a terminal
 * it is printed; when stdout is a log stream (a pipe, as in a container) it is
 * in no output, but in a file only its owner can read, whose path is logged.
 */

const scratch = await mkdtemp(path.join(tmpdir(), 'fhir-webhooks-first-key-'));
const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  await stopStartedCommands();
  for (const cleanup of cleanups.reverse()) await cleanup();
  await rm(scratch, { recursive: true, force: true });
});

async function databaseWithoutKeys(): Promise<TestDatabase> {
  const database = await createTestDatabase();
  cleanups.push(() => database.drop());
  expect((await database.pool.query('SELECT count(*)::int AS keys FROM webhook.api_keys')).rows).toEqual([{ keys: 0 }]);
  return database;
}

/** An empty database (no schema): where a first start applies every migration. */
async function emptyDatabase(): Promise<Pick<TestDatabase, 'url'>> {
  const adminUrl = inject('adminUrl');
  const name = `fhir_webhooks_empty_${Math.random().toString(36).slice(2, 10)}`;
  await withAdmin(adminUrl, (admin) => admin.query(`CREATE DATABASE ${name}`));
  cleanups.push(() => withAdmin(adminUrl, (admin) => admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)));
  return { url: databaseUrl(adminUrl, name) };
}

/** `serve` on a database with no API key, its stdout a pipe unless `inTerminal` runs it under script(1)'s pseudo-terminal. */
async function serve(database: Pick<TestDatabase, 'url'>, dataDir: string, { inTerminal = false } = {}) {
  const port = await freePort();
  const environment = childEnvironment({
    DATABASE_URL: database.url,
    SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'),
    EMBEDDED_DATA_DIR: dataDir,
    PORT: String(port),
  });
  const command = inTerminal
    ? startCommand('/usr/bin/script', ['--quiet', '--return', '--command', `${process.execPath} ${cliEntry} serve`, '/dev/null'], environment)
    : startCommand(process.execPath, [cliEntry, 'serve'], environment);
  await command.waitFor(/Listening on/);
  const works = async (key: string) =>
    (await fetch(`http://127.0.0.1:${port}/fhir/resources/Subscription?_count=1`, { headers: { 'x-api-key': key } })).status === 200;
  return { command, port, works };
}

describe('the first API key', () => {
  it('goes, when stdout is not a terminal, to a file of mode 0600 whose path is logged, and is in no output', { timeout: 60_000 }, async () => {
    const database = await databaseWithoutKeys();
    // Inside a checkout, under a name the project's .gitignore does not know.
    execFileSync('git', ['init', '--quiet', path.join(scratch, 'checkout')]);
    const dataDir = path.join(scratch, 'checkout', '.data-op');
    const file = path.join(dataDir, 'first-api-key');
    // A file left by an earlier database, readable by all: replaced, not written into.
    await mkdir(dataDir, { recursive: true });
    await writeFile(file, 'fwk_stale\n', { mode: 0o644 });

    const { command, works } = await serve(database, dataDir);
    const logged = command
      .output()
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { level: number; msg: string; file?: string })
      .find((line) => line.file !== undefined);
    expect(logged).toMatchObject({ level: 30, file, msg: expect.stringContaining(`wrote it to ${file}, readable by its owner only`) });
    expect(logged!.msg).toContain('npm run cli -- api-key create --name <name>');

    expect(statSync(file).mode & 0o777).toBe(0o600);
    const key = readFileSync(file, 'utf8').trim();
    expect(key).toMatch(/^fwk_[\w-]{43}$/);
    expect(await works(key)).toBe(true);
    // The key is in the data folder, which git does not see (the service wrote a .gitignore there).
    expect(execFileSync('git', ['-C', path.join(scratch, 'checkout'), 'status', '--porcelain', '--untracked-files=all'], { encoding: 'utf8' })).toBe('');

    command.interrupt('SIGINT');
    expect(await command.exited).toBe(0);
    expect(command.output()).not.toContain(key);
    expect(command.output()).not.toContain('API key:');
  });

  it('is not made when that file cannot be written: the log says how to get one, and the service runs', { timeout: 60_000 }, async () => {
    const database = await databaseWithoutKeys();
    // A data folder inside a regular file: not writable, even by root.
    const notAFolder = path.join(scratch, 'not-a-folder');
    await writeFile(notAFolder, '');
    const { command } = await serve(database, path.join(notAFolder, 'data'));
    expect(command.output()).toMatch(
      /"level":40.*no API key exists, and none was made: the first one could not be written to .*not-a-folder\/data\/first-api-key.*Set BOOTSTRAP_API_KEY, or make one with: npm run cli -- api-key create/,
    );
    expect((await database.pool.query('SELECT count(*)::int AS keys FROM webhook.api_keys')).rows).toEqual([{ keys: 0 }]);
    command.interrupt('SIGINT');
    expect(await command.exited).toBe(0);
  });

  it('is printed on a terminal, with a curl line that answers something short, and no file is written', { timeout: 60_000 }, async () => {
    const database = await databaseWithoutKeys();
    const dataDir = path.join(scratch, 'terminal');
    const { command, port, works } = await serve(database, dataDir, { inTerminal: true });
    const [, key] = await command.waitFor(/^API key: (\S+)\r?$/m);
    expect(await works(key!)).toBe(true);
    const [, hintUrl] = new RegExp(`curl -H 'x-api-key: ${key}' '(\\S+)'`).exec(command.output())!;
    expect(hintUrl).toBe(`http://localhost:${port}/fhir/resources/Subscription?_count=1`);
    const hinted = await fetch(hintUrl!.replace('localhost', '127.0.0.1'), { headers: { 'x-api-key': key! } });
    expect((await hinted.text()).length).toBeLessThan(2_000);
    expect(command.output()).toContain('Lost it? Make another with: npm run cli -- api-key create --name <name>');
    expect(() => statSync(path.join(dataDir, 'first-api-key'))).toThrow(/ENOENT/);
    command.interrupt('SIGINT');
    await command.exited;
  });
});

describe("a first start's migrations in the log", () => {
  const summary = /applied database migrations: (\d+) migrations \(0001_\w+ to (\d{4})_\w+\) and (\d+) function files/;

  it('on a terminal, are one short line: how many, the first and the last', { timeout: 60_000 }, async () => {
    const { command } = await serve(await emptyDatabase(), path.join(scratch, 'migrated-terminal'), { inTerminal: true });
    const [line] = command
      .output()
      .split('\n')
      .filter((text) => text.includes('applied database migrations'));
    expect(line).toMatch(summary);
    expect(line!.length).toBeLessThan(200);
    command.interrupt('SIGINT');
    await command.exited;
  });

  it('in the JSON log, name every migration and function file applied', { timeout: 60_000 }, async () => {
    const { command } = await serve(await emptyDatabase(), path.join(scratch, 'migrated-piped'));
    const applied = command
      .output()
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { msg: string; migrations?: string[] })
      .find((line) => line.migrations !== undefined)!;
    const [, migrations, last, functions] = summary.exec(applied.msg)!;
    expect(applied.migrations).toHaveLength(Number(migrations) + Number(functions));
    const migrationFiles = readdirSync('db/migrations')
      .filter((file) => file.endsWith('.sql'))
      .sort();
    expect(applied.migrations!.filter((name) => !name.startsWith('functions/'))).toEqual(migrationFiles.map((file) => file.slice(0, -'.sql'.length)));
    expect(migrationFiles.at(-1)).toMatch(new RegExp(`^${last}_`));
    expect(applied.migrations!.filter((name) => name.startsWith('functions/'))).toHaveLength(Number(functions));
    command.interrupt('SIGINT');
    await command.exited;
  });
});
