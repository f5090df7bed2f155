import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { startReceiver, waitFor, type Receiver } from '../support/receiver.ts';
import { subscribe, untilStatus } from '../support/subscriptions.ts';

/**
 * docs/receivers.md's signature checks, each run in its own language (where
 * that runtime is installed) against real calls of the service before, during
 * and after a rotation of the secret, with the secrets a receiver holds as it
 * switches, and against the same calls forged.
 */

const page = readFileSync('docs/receivers.md', 'utf8');
const snippet = (language: string) => {
  const block = new RegExp('```' + language + '\\n([\\s\\S]*?)```').exec(page)?.[1];
  if (block === undefined) throw new Error(`docs/receivers.md has no ${language} block`);
  return block;
};

/**
 * A runnable program around each snippet: arguments body file, X-Hub-Signature and X-Hub-Signature-Next
 * ('-' for none), then the secrets held; prints true or false.
 */
const languages = [
  {
    language: 'ts',
    installed: true,
    file: 'verify.ts',
    program: (code: string) =>
      `${code}\nimport { readFileSync } from 'node:fs';\nconst [file, signature, next, ...secrets] = process.argv.slice(2);\n` +
      `const header = (value: string) => (value === '-' ? undefined : value);\n` +
      `console.log(isFromTheService(readFileSync(file!), [header(signature!), header(next!)], secrets));\n`,
    command: (file: string) => [process.execPath, file],
  },
  {
    language: 'python',
    installed: spawnSync('python3', ['--version']).status === 0,
    file: 'verify.py',
    program: (code: string) =>
      `${code}\nimport sys\nbody = open(sys.argv[1], "rb").read()\nheaders = [None if value == "-" else value for value in sys.argv[2:4]]\n` +
      `print("true" if is_from_the_service(body, headers, sys.argv[4:]) else "false")\n`,
    command: (file: string) => ['python3', file],
  },
  {
    language: 'java',
    installed: spawnSync('java', ['-version']).status === 0,
    file: 'Verify.java',
    program: (code: string) => {
      const lines = code.split('\n');
      const imports = lines.filter((line) => line.startsWith('import '));
      const method = lines.filter((line) => !line.startsWith('import ')).join('\n');
      return (
        `${imports.join('\n')}\n\npublic class Verify {\n${method}\n  public static void main(String[] args) throws Exception {\n` +
        `    byte[] body = java.nio.file.Files.readAllBytes(java.nio.file.Path.of(args[0]));\n` +
        `    java.util.List<String> headers = java.util.Arrays.asList(args[1].equals("-") ? null : args[1], args[2].equals("-") ? null : args[2]);\n` +
        `    System.out.println(isFromTheService(body, headers, java.util.Arrays.asList(args).subList(3, args.length)));\n  }\n}\n`
      );
    },
    command: (file: string) => ['java', file],
  },
];

const secret = 'receiver-doc-secret';
const nextSecret = 'receiver-doc-next-secret';
type Call = { body: Buffer; signature: string; next: string };
/** Calls of one subscription: before its secret is rotated, during the overlap, and after it. */
const calls = {} as Record<'before' | 'during' | 'after', Call>;
let t: TestApp;
let workers: Workers;
let receiver: Receiver;
let dir: string;

beforeAll(async () => {
  t = await startTestApp();
  workers = await startWorkers(
    loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' }),
    t.database,
    testSecretsKey,
    pino({ level: 'silent' }),
  );
  receiver = await startReceiver();
  const { id } = await subscribe(t, 'Patient?family=Verified', receiver.url, { header: [`secret: ${secret}`] });
  await untilStatus(t, id, 'active');
  const received = async () => {
    // A resource with characters a JSON parser would write back differently: the check must be on the raw bytes.
    const patient = (await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Verified', given: ['Zoë', 'Ōsaka \u2028'] }] })).json<{
      id: string;
    }>();
    const call = await waitFor(() => receiver.calls.find((each) => each.json.id === patient.id));
    return { body: call.body, signature: String(call.headers['x-hub-signature'] ?? '-'), next: String(call.headers['x-hub-signature-next'] ?? '-') };
  };
  calls.before = await received();
  const rotation = await t.fhir('POST', `/Subscription/${id}/$rotate-secret`, {
    resourceType: 'Parameters',
    parameter: [
      { name: 'secret', valueString: nextSecret },
      { name: 'overlapSeconds', valueUnsignedInt: 3 },
    ],
  });
  expect(rotation.statusCode, rotation.body).toBe(200);
  calls.during = await received();
  const until = new Date(rotation.json().parameter.find((item: { name: string }) => item.name === 'previousSecretUntil').valueInstant);
  expect(Date.now()).toBeLessThan(until.getTime());
  await new Promise((resolve) => setTimeout(resolve, until.getTime() - Date.now() + 100));
  calls.after = await received();
  dir = mkdtempSync(path.join(tmpdir(), 'receivers-doc-'));
}, 60_000);

afterAll(async () => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  await workers?.stop();
  await receiver?.close();
  await t?.close();
});

describe('the TypeScript check of docs/receivers.md in a CommonJS package', () => {
  it('runs as a .mts file, as the page says, and accepts a real call', () => {
    const commonJsPackage = path.join(dir, 'commonjs-package');
    mkdirSync(commonJsPackage);
    writeFileSync(path.join(commonJsPackage, 'package.json'), JSON.stringify({ type: 'commonjs' }));
    const [typescript] = languages;
    const source = path.join(commonJsPackage, 'verify.mts');
    writeFileSync(source, typescript!.program(snippet('ts')));
    const bodyFile = path.join(commonJsPackage, 'body');
    writeFileSync(bodyFile, calls.before.body);
    const result = spawnSync(process.execPath, [source, bodyFile, calls.before.signature, calls.before.next, secret], { encoding: 'utf8' });
    expect(result.stderr).toBe('');
    expect(result.stdout.trim()).toBe('true');
  });
});

describe.each(languages)('the $language signature check of docs/receivers.md', ({ language, installed, file, program, command }) => {
  it.skipIf(!installed)(
    `accepts real calls with the secrets a receiver holds through a rotation, and refuses them forged (skipped where ${language}'s runtime is missing)`,
    () => {
      const source = path.join(dir, file);
      writeFileSync(source, program(snippet(language)));
      const verdict = ({ body, signature, next }: Call, secrets: string[]) => {
        const bodyFile = path.join(dir, `${language}-body`);
        writeFileSync(bodyFile, body);
        const [executable, ...args] = command(source);
        const result = spawnSync(executable!, [...args, bodyFile, signature, next, ...secrets], { encoding: 'utf8' });
        expect(result.stderr).toBe('');
        return result.stdout.trim();
      };
      const { before, during, after } = calls;
      const forged = (call: Call) => ({ ...call, body: Buffer.concat([call.body, Buffer.from(' ')]) });
      expect(before.signature).toMatch(/^sha256=[0-9a-f]{64}$/);
      expect(before.next).toBe('-');
      expect(verdict(before, [secret])).toBe('true');
      expect(verdict(forged(before), [secret])).toBe('false');
      expect(verdict(before, ['another-secret'])).toBe('false');
      expect(verdict({ ...before, signature: '-' }, [secret])).toBe('false');

      // During the overlap: accepted by a receiver holding the old secret, both, or the new one alone.
      expect(during.next).toMatch(/^sha256=[0-9a-f]{64}$/);
      expect(verdict(during, [secret])).toBe('true');
      expect(verdict(during, [secret, nextSecret])).toBe('true');
      expect(verdict(during, [nextSecret])).toBe('true');
      expect(verdict(forged(during), [secret, nextSecret])).toBe('false');
      expect(verdict(during, ['another-secret'])).toBe('false');

      // After it: the new secret alone signs.
      expect(after.next).toBe('-');
      expect(verdict(after, [nextSecret])).toBe('true');
      expect(verdict(after, [secret, nextSecret])).toBe('true');
      expect(verdict(after, [secret])).toBe('false');
    },
  );
});
