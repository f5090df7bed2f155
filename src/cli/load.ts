import { constants as fsConstants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import path from 'node:path';
import { Presets, SingleBar } from 'cli-progress';
import { InvalidArgumentError, type Command } from 'commander';
import { describeError } from '../config/logger.ts';
import type { Db } from '../db/database.ts';
import type { LoadProgress } from '../loading/ndjson.ts';
import { CommandError, withDatabase } from './command.ts';

/** The loader, loaded when the command runs (src/cli/main.ts says why). */
const loading = () => import('../loading/ndjson.ts');

/** `load`: NDJSON files into the store. */
export function registerLoadCommand(program: Command): void {
  program
    .command('load')
    .description(
      'load FHIR Bulk Data NDJSON files (.ndjson, .ndjson.gz) into the store, a transaction per chunk: a committed chunk notifies its subscribers, a failed one nobody',
    )
    .argument('<files...>', 'NDJSON files, one resource per line, any mix of types')
    .option('--chunk-size <n>', 'resources per transaction', parsePositiveInteger, 1000)
    .option('--dry-run', 'check every line and report, write nothing')
    .action((files: string[], options: { chunkSize: number; dryRun?: boolean }) =>
      withDatabase((database) => load(database.db, files, { chunkSize: options.chunkSize, dryRun: options.dryRun === true })),
    );
}

/** Why a file to load cannot be read, in a user's words; undefined when it can. */
async function unreadable(file: string): Promise<string | undefined> {
  try {
    if ((await stat(file)).isDirectory()) return 'it is a directory (give the files in it)';
    await access(file, fsConstants.R_OK);
    return undefined;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT')
      return path.isAbsolute(file) ? 'no such file' : `no such file (a relative path is read from ${process.cwd()}, where npm run runs: the project's folder)`;
    if (code === 'EACCES') return 'not readable by this user';
    return describeError(error);
  }
}

function parsePositiveInteger(value: string): number {
  if (!/^[1-9]\d*$/.test(value)) throw new InvalidArgumentError('expected a positive integer.');
  return Number(value);
}

/**
 * `load`: the files through src/loading/ndjson.ts, with a progress bar
 * (cli-progress) on a terminal and a plain line every 2 s otherwise; then a
 * summary with every refused line's number. Exits 1 if any line was refused.
 */
async function load(db: Db, files: string[], options: { chunkSize: number; dryRun: boolean }): Promise<void> {
  for (const file of files) {
    const problem = await unreadable(file);
    if (problem !== undefined) throw new CommandError(`Cannot read ${file}: ${problem}.`, 2);
  }
  const bar = process.stderr.isTTY
    ? new SingleBar(
        { format: '{bar} {percentage}% | {lines} lines, {loaded} loaded, {refused} refused | {rate}/s | ETA {eta_formatted}', hideCursor: true },
        Presets.shades_classic,
      )
    : undefined;
  const started = performance.now();
  let lastLine = started;
  const onProgress = ({ lines, loaded, refused, bytesRead, totalBytes }: LoadProgress) => {
    const rate = Math.round(lines / Math.max((performance.now() - started) / 1000, 0.001));
    if (bar !== undefined) {
      if (bar.getTotal() !== totalBytes) bar.start(totalBytes, 0);
      bar.update(bytesRead, { lines, loaded, refused, rate });
    } else if (performance.now() - lastLine >= 2_000) {
      lastLine = performance.now();
      console.log(
        `${lines} lines read (${Math.round((100 * bytesRead) / Math.max(totalBytes, 1))}%), ${loaded} ${options.dryRun ? 'valid' : 'loaded'}, ${refused} refused, ${rate} lines/s`,
      );
    }
  };
  const { loadNdjson } = await loading();
  const summary = await loadNdjson(db, files, { ...options, onProgress }).finally(() => bar?.stop());
  const verb = options.dryRun ? 'Checked (dry run, nothing written):' : 'Loaded';
  console.log(
    `${verb} ${summary.loaded} resources of ${summary.lines} lines in ${summary.seconds.toFixed(1)} s (${Math.round(summary.loaded / Math.max(summary.seconds, 0.001))} resources/s).`,
  );
  if (summary.refusals.length === 0) return;
  const shown = summary.refusals
    .slice(0, 100)
    .map(({ file, line, lastLine, reason }) => `  ${file}:${lastLine === undefined ? line : `${line}-${lastLine}`}: ${reason}`);
  const more = summary.refusals.length > shown.length ? [`  … and ${summary.refusals.length - shown.length} more`] : [];
  throw new CommandError([`Not loaded: ${summary.refused} lines.`, ...shown, ...more].join('\n'));
}
