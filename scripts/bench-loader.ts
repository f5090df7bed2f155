/**
 * npm run bench:loader [-- --lines N]: `npm run cli -- load` on a generated
 * FHIR Bulk Data file (half Patients, half Observations, each with its own
 * id), into a scratch database with no subscriptions, at chunk sizes 1,000
 * and 5,000, a fresh database each, run as a user runs it (`npm run cli --
 * load`). Prints what the loader reports (its own rate, from its first line
 * read to its last commit), and the rate as the user times it: from the
 * command's start to its exit, start-up and shutdown included.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Command } from 'commander';
import { createScratchDatabase } from './support/scratch-database.ts';

const options = new Command('npm run bench:loader --')
  .description('The NDJSON loader, into an empty store with no subscriptions.')
  .option('--lines <n>', 'lines of the generated file', '100000')
  .parse()
  .opts<{ lines: string }>();

const lines = Number(options.lines);
const dir = mkdtempSync(path.join(tmpdir(), 'bench-loader-'));
const file = path.join(dir, 'export.ndjson');
writeFileSync(
  file,
  Array.from({ length: lines }, (_, index) =>
    JSON.stringify(
      index % 2 === 0
        ? {
            resourceType: 'Patient',
            id: `p${index}`,
            active: true,
            name: [{ family: `Family${index % 1000}`, given: [`Given${index}`] }],
            birthDate: '1980-01-01',
          }
        : {
            resourceType: 'Observation',
            id: `o${index}`,
            status: 'final',
            code: { coding: [{ system: 'http://loinc.org', code: '29463-7' }] },
            subject: { reference: `Patient/p${index - 1}` },
            valueQuantity: { value: index % 200, unit: 'kg' },
          },
    ),
  ).join('\n') + '\n',
);

let failed = false;
try {
  for (const chunkSize of [1000, 5000]) {
    const database = await createScratchDatabase();
    try {
      const started = performance.now();
      const run = spawnSync('npm', ['run', '--silent', 'cli', '--', 'load', '--chunk-size', String(chunkSize), file], {
        env: { ...process.env, DATABASE_URL: database.url, LOG_LEVEL: 'warn' },
        encoding: 'utf8',
      });
      const seconds = (performance.now() - started) / 1000;
      const summary = /^Loaded .*$/m.exec(run.stdout)?.[0];
      const endToEnd = `${Math.round(lines / seconds).toLocaleString('en-US')} resources/s from the command's start to its exit (${seconds.toFixed(1)} s)`;
      console.log(
        `chunk size ${chunkSize}: ${summary === undefined ? `failed (exit ${run.status}): ${run.stdout}${run.stderr}` : `${summary.replace(/\.$/, '')}; ${endToEnd}`}`,
      );
      if (run.status !== 0) failed = true;
    } finally {
      await database.drop();
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
process.exitCode = failed ? 1 : 0;
