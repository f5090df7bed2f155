import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { childEnvironment, cliEntry, runCommand, startCommand, stopStartedCommands } from '../support/commands.ts';
import { startReceiver } from '../support/receiver.ts';
import { startHealthyAndFailing, subscribe, type HealthyAndFailing } from '../support/subscriptions.ts';

/**
 * The operator's commands (`subscriptions list`, `subscriptions show`,
 * `deliveries tail`), run as processes against a database where a
 * subscription delivers and another went to error.
 */

let t: TestApp;
let scene: HealthyAndFailing;

beforeAll(async () => {
  t = await startTestApp();
  scene = await startHealthyAndFailing(t, { healthyCriteria: 'Patient?family=Healthy', healthyEndpointQuery: '?token=query-secret', failingStatus: 503 });
}, 60_000);

afterAll(async () => {
  await stopStartedCommands();
  await scene?.close();
  await t?.close();
});

const environment = () => childEnvironment({ DATABASE_URL: t.database.url, LOG_LEVEL: 'warn' });
const cli = (...args: string[]) => runCommand(process.execPath, [cliEntry, ...args], environment());

describe('subscriptions list', () => {
  it('shows every subscription with its status, failures, criteria, endpoint masked and error', async () => {
    const run = await cli('subscriptions', 'list');
    expect(run.exitCode).toBe(0);
    const [header, ...rows] = run.output.trimEnd().split('\n');
    expect(header).toMatch(/^ID\s+STATUS\s+FAILED CALLS SINCE SUCCESS\s+DEACTIVATIONS 24H\s+LAST SUCCESS\s+CRITERIA\s+ENDPOINT\s+ERROR$/);
    expect(rows).toHaveLength(2);
    expect(rows[0]).toMatch(
      new RegExp(`^${scene.healthy}\\s+active\\s+0\\s+0\\s+\\S+Z\\s+Patient\\?family=Healthy\\s+http://127\\.0\\.0\\.1:\\d+/hook\\?token=\\*\\*\\*$`),
    );
    // In error after one failed call: the failures an operator means, not the refusals in a row (0 here: a 503 is not a refusal); deactivated once.
    expect(rows[1]).toMatch(new RegExp(`^${scene.failing}\\s+error\\s+1\\s+1\\s+\\S+Z\\s+Patient\\?family=Failing\\s+\\S+\\s+HTTP 503 from `));
    expect(run.output).not.toContain('query-secret');
  });

  it('filters by status, and refuses an unknown one as a usage error', async () => {
    const errors = await cli('subscriptions', 'list', '--status', 'error');
    expect(errors.output).toContain(scene.failing);
    expect(errors.output).not.toContain(scene.healthy);
    expect((await cli('subscriptions', 'list', '--status', 'off')).output).toBe('No subscriptions.\n');
    const wrong = await cli('subscriptions', 'list', '--status', 'broken');
    expect(wrong.exitCode).toBe(2);
    expect(wrong.output).toMatch(/unknown status broken: use requested, active, error, off/);
  });
});

describe('subscriptions show', () => {
  it('shows the state with its reason, the last calls, and what is queued', async () => {
    const run = await cli('subscriptions', 'show', scene.failing);
    expect(run.exitCode).toBe(0);
    expect(run.output).toMatch(
      new RegExp(
        `^Subscription ${scene.failing}\\n  status    error: HTTP 503 from http://127\\.0\\.0\\.1:\\d+/hook; Patient/\\S+ \\(version 1\\) was not delivered\\n`,
      ),
    );
    expect(run.output).toContain('  criteria  Patient?family=Failing\n');
    expect(run.output).toMatch(/\n {2}failed {4}1 call since the last success \(\S+Z\); 0 events refused for good in a row\n/);
    expect(run.output).toContain('\n  in error  1 time in the last 24 hours, 1 in a row without a delivery\n');
    // The subscriber's own answer says why.
    // Each call with its id and, for a notification, its event number: what `deliveries resend --attempt` and `--event` take.
    expect(run.output).toMatch(
      /Last calls \(newest first\):\nSTARTED\s+CALL\s+KIND\s+EVENT\s+RESOURCE\s+ATTEMPT\s+OUTCOME\s+HTTP\s+MS\s+ERROR\s+ANSWER\n\S+\s+\d+\s+notification\s+1\s+Patient\/\S+\/_history\/1\s+1\s+failed\s+503\s+\d+\s+HTTP 503\s+refused with 503\n\S+\s+\d+\s+handshake\s+-\s+-\s+1\s+delivered\s+200\s+\d+[^\n]*\n/,
    );
    expect(run.output).toMatch(/\nQueued:\n {2}nothing\n$/);
  });

  it('says which id it does not know, and exits 1', async () => {
    const run = await cli('subscriptions', 'show', '00000000-0000-4000-8000-000000000000');
    expect(run.exitCode).toBe(1);
    expect(run.output).toContain("No subscription has id '00000000-0000-4000-8000-000000000000'");
  });
});

describe('deliveries tail', () => {
  it('prints each call as it is recorded, from its start on, and stops on Ctrl-C with exit 0', { timeout: 30_000 }, async () => {
    const tail = startCommand(process.execPath, [cliEntry, 'deliveries', 'tail'], environment());
    await tail.waitFor(/Following the calls to every subscriber; Ctrl-C stops\./);
    const patient = (await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Healthy' }] })).json<{ id: string }>();
    const [line] = await tail.waitFor(
      new RegExp(`^\\S+  ${scene.healthy}  call \\d+  notification event \\d+ Patient/${patient.id}/_history/1 #1  delivered 200 \\d+ ms$`, 'm'),
    );
    expect(line).toBeDefined();
    // Only calls from its start: the older ones are not repeated.
    expect(tail.output()).not.toContain('handshake');
    tail.interrupt('SIGINT');
    expect(await tail.exited).toBe(0);
  });
});

describe('subscriptions list, with a long criteria', () => {
  it('pads a column to 60 characters at most: a longer criteria or endpoint runs past it on its own line, whole, and does not widen the others', async () => {
    const family = `Long${'x'.repeat(200)}`;
    const receiver = await startReceiver();
    try {
      const { id } = await subscribe(t, `Patient?family=${family}`, `${receiver.url}?${'q'.repeat(100)}=1`);
      const run = await cli('subscriptions', 'list');
      expect(run.exitCode).toBe(0);
      const lines = run.output.trimEnd().split('\n');
      expect(lines.find((line) => line.startsWith(id))).toMatch(
        new RegExp(`  Patient\\?family=${family}  http://127\\.0\\.0\\.1:\\d+/hook\\?q{100}=\\*\\*\\*$`),
      );
      // The columns are no wider than 60: the other rows are not padded to the long values.
      const header = lines[0]!;
      expect(header.indexOf('ENDPOINT') - header.indexOf('CRITERIA')).toBe(60 + 2);
      expect(header.indexOf('ERROR') - header.indexOf('ENDPOINT')).toBe(60 + 2);
      expect(lines.find((line) => line.startsWith(scene.healthy))!.length).toBeLessThan(header.length + 10);
    } finally {
      await receiver.close();
    }
  });
});
