import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { stripVTControlCharacters } from 'node:util';
import { gzipSync } from 'node:zlib';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { childEnvironment, cliEntry, runCommand } from '../support/commands.ts';
import { startReceiver, waitFor, type Receiver } from '../support/receiver.ts';
import { subscribe, untilStatus } from '../support/subscriptions.ts';

/**
 * `npm run cli -- load` on a generated 100,000-line NDJSON file (gzipped),
 * with a subscription matching one line in ten, some invalid lines, and one
 * chunk that fails inside the database.
 */

const lineCount = 100_000;
const chunkSize = 1_000;
/** Lines refused by the loader's checks, by line number (1-based), with what the summary says. */
const invalid = new Map<number, { text: string; reason: RegExp }>([
  [17, { text: '{"resourceType": "Patient", "name": [', reason: /not JSON/ }],
  [503, { text: '{"resourceType": "Spaceship", "id": "x"}', reason: /unknown resourceType 'Spaceship'/ }],
  [20_000, { text: '{"resourceType": "Patient", "id": "has a space"}', reason: /invalid id "has a space"/ }],
  [77_777, { text: '{"resourceType": "Subscription", "status": "requested"}', reason: /subscriptions are created through the API/ }],
  [99_999, { text: '[1, 2, 3]', reason: /not a FHIR resource/ }],
]);
/** The line whose resource the database refuses (a trigger of this test's): its whole chunk rolls back. */
const poisonLine = 45_500;
/** Its chunk: the loader's chunks are of `chunkSize` resources, counted over the lines that pass its checks. */
const goodLines = Array.from({ length: lineCount }, (_, index) => index + 1).filter((number) => !invalid.has(number));
const poisonChunkStart = Math.floor(goodLines.indexOf(poisonLine) / chunkSize) * chunkSize;
const poisonChunk = { first: goodLines[poisonChunkStart]!, last: goodLines[poisonChunkStart + chunkSize - 1]! };

function line(number: number): string {
  const known = invalid.get(number);
  if (known !== undefined) return known.text;
  if (number === poisonLine) return JSON.stringify({ resourceType: 'Patient', id: 'poison', name: [{ family: 'Loaded' }] });
  return number % 2 === 0
    ? JSON.stringify({
        resourceType: 'Observation',
        id: `o${number}`,
        status: 'final',
        code: { text: 'weight' },
        subject: { reference: `Patient/p${number - 1}` },
      })
    : JSON.stringify({ resourceType: 'Patient', id: `p${number}`, name: [{ family: number % 10 === 1 ? 'Loaded' : 'Other', given: [`G${number}`] }] });
}

/** What the subscription Patient?family=Loaded must receive: the matching Patients outside the failed chunk, each once. */
const expectedIds = Array.from({ length: lineCount }, (_, index) => index + 1)
  .filter((number) => number % 2 === 1 && number % 10 === 1 && !invalid.has(number) && (number < poisonChunk.first || number > poisonChunk.last))
  .map((number) => `p${number}`);

let t: TestApp;
let workers: Workers;
let receiver: Receiver;
let dir: string;
let file: string;

beforeAll(async () => {
  t = await startTestApp();
  workers = await startWorkers(
    loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' }),
    t.database,
    testSecretsKey,
    pino({ level: 'silent' }),
  );
  receiver = await startReceiver();
  const { id } = await subscribe(t, 'Patient?family=Loaded', receiver.url);
  await untilStatus(t, id, 'active');
  // A rule a DBA might have added: the database refuses this one resource, failing its statement.
  await t.database.pool.query(`
    CREATE FUNCTION public.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.content ->> 'id' = 'poison' THEN RAISE EXCEPTION 'poison is not welcome here'; END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER refuse_poison BEFORE INSERT ON fhir.resources FOR EACH ROW EXECUTE FUNCTION public.refuse_poison();`);
  dir = mkdtempSync(path.join(tmpdir(), 'loader-'));
  file = path.join(dir, 'export.ndjson.gz');
  writeFileSync(file, gzipSync(Array.from({ length: lineCount }, (_, index) => line(index + 1)).join('\n') + '\n'));
}, 60_000);

afterAll(async () => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  await workers?.stop();
  await receiver?.close();
  await t?.close();
});

const load = (...args: string[]) =>
  runCommand(process.execPath, [cliEntry, 'load', ...args], childEnvironment({ DATABASE_URL: t.database.url, LOG_LEVEL: 'warn' }));
const storedCount = async () => (await t.database.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM fhir.resources')).rows[0]!.n;

describe('npm run cli -- load', () => {
  it('says why a file cannot be read (missing, and from which folder a relative path is read; a directory) and exits 2, as for wrong input', async () => {
    const missing = await load('missing.ndjson');
    expect(missing.exitCode).toBe(2);
    expect(missing.output).toContain(
      `Cannot read missing.ndjson: no such file (a relative path is read from ${process.cwd()}, where npm run runs: the project's folder).`,
    );
    const absolute = await load('/nonexistent/missing.ndjson');
    expect(absolute.exitCode).toBe(2);
    expect(absolute.output.trim()).toBe('Cannot read /nonexistent/missing.ndjson: no such file.');
    const folder = await load('docs');
    expect(folder.exitCode).toBe(2);
    expect(folder.output).toContain('Cannot read docs: it is a directory (give the files in it).');
  });

  it('--dry-run checks every line, reports the refused ones by number, writes nothing and exits 1', { timeout: 60_000 }, async () => {
    const run = await load('--dry-run', file);
    expect(run.exitCode).toBe(1);
    expect(run.output).toMatch(new RegExp(`^Checked \\(dry run, nothing written\\): ${lineCount - invalid.size} resources of ${lineCount} lines in `, 'm'));
    for (const [number, { reason }] of invalid) expect(run.output).toMatch(new RegExp(`${file.replaceAll('.', '\\.')}:${number}: .*${reason.source}`));
    expect(await storedCount()).toBe(0);
  });

  it(
    'loads the good lines chunk by chunk; the chunk the database refuses rolls back and notifies nobody; every other match is delivered once',
    { timeout: 120_000 },
    async () => {
      const run = await load('--chunk-size', String(chunkSize), file);
      expect(run.exitCode).toBe(1);
      const loaded = lineCount - invalid.size - chunkSize;
      expect(run.output).toMatch(new RegExp(`^Loaded ${loaded} resources of ${lineCount} lines in [\\d.]+ s \\(\\d+ resources/s\\)\\.$`, 'm'));
      expect(run.output).toMatch(new RegExp(`^Not loaded: ${invalid.size + chunkSize} lines\\.$`, 'm'));
      expect(run.output).toContain(
        `  ${file}:${poisonChunk.first}-${poisonChunk.last}: a chunk of ${chunkSize} resources failed in the database and was rolled back: poison is not welcome here\n`,
      );
      for (const [number, { reason }] of invalid) expect(run.output).toMatch(new RegExp(`${file.replaceAll('.', '\\.')}:${number}: .*${reason.source}`));
      // Progress without a terminal: a plain line every 2 s, if the load lasted that long.
      const seconds = Number(/ lines in ([\d.]+) s /.exec(run.output)![1]);
      if (seconds > 2.5) expect(run.output).toMatch(/^\d+ lines read \(\d+%\), \d+ loaded, \d+ refused, \d+ lines\/s$/m);
      expect(await storedCount()).toBe(loaded);
      // Nothing of the refused chunk is stored; the lines on either side of it are.
      const idOf = (number: number) => (number % 2 === 0 ? `o${number}` : `p${number}`);
      const chunkIds = goodLines
        .slice(poisonChunkStart, poisonChunkStart + chunkSize)
        .filter((number) => number !== poisonLine)
        .map(idOf);
      expect(chunkIds).toHaveLength(chunkSize - 1);
      const stored = async (ids: string[]) =>
        (await t.database.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM fhir.resources WHERE id = ANY($1)', [ids])).rows[0]!.n;
      expect(await stored(chunkIds)).toBe(0);
      expect(await stored([idOf(poisonChunk.first - 1), idOf(poisonChunk.last + 1)])).toBe(2);

      const delivered = () => receiver.calls.filter((call) => call.json.resourceType === 'Patient').map((call) => call.json.id as string);
      await waitFor(() => (delivered().length >= expectedIds.length ? true : undefined), 90_000, `${expectedIds.length} deliveries`);
      // Late extras would show up here: wait a moment, then compare exactly.
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(delivered().length).toBe(expectedIds.length);
      expect(new Set(delivered())).toEqual(new Set(expectedIds));
    },
  );

  it.skipIf(!existsSync('/usr/bin/script'))('shows a progress bar with the rate and the ETA on a terminal', { timeout: 60_000 }, async () => {
    // util-linux's script(1) gives the loader a pseudo-terminal.
    const command = `exec ${process.execPath} ${cliEntry} load --dry-run ${file}`;
    const run = await runCommand(
      '/usr/bin/script',
      ['--quiet', '--return', '--command', command, '/dev/null'],
      childEnvironment({ DATABASE_URL: t.database.url, LOG_LEVEL: 'warn' }),
    );
    const screen = stripVTControlCharacters(run.output);
    expect(screen).toMatch(/[█░]+ 100% \| \d+ lines, \d+ loaded, \d+ refused \| \d+\/s \| ETA /);
    expect(screen).not.toMatch(/^\d+ lines read/m);
  });

  it('writes a resource given several times as its versions, in line order, chunks in flight or not; reads plain .ndjson', async () => {
    const plain = path.join(dir, 'versions.ndjson');
    const version = (family: string) => JSON.stringify({ resourceType: 'Patient', id: 'twice', name: [{ family }] });
    const other = (n: number) => JSON.stringify({ resourceType: 'Patient', id: `other${n}`, active: true });
    writeFileSync(plain, [version('First'), other(1), other(2), version('Second'), other(3), version('Third'), ''].join('\r\n'));
    const run = await load('--chunk-size', '2', plain);
    expect(run.output).toMatch(/^Loaded 6 resources of 6 lines in /m);
    expect(run.exitCode).toBe(0);
    const { rows } = await t.database.pool.query(
      `SELECT version_id, content -> 'name' -> 0 ->> 'family' AS family FROM fhir.resource_history WHERE id = 'twice' ORDER BY version_id`,
    );
    expect(rows).toEqual([
      { version_id: 1, family: 'First' },
      { version_id: 2, family: 'Second' },
      { version_id: 3, family: 'Third' },
    ]);
  });
});
