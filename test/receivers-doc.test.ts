import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/index.ts';
import { startWorkers, type Workers } from '../src/dispatch/worker.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from './support/app.ts';
import { startReceiver, waitFor, type Receiver } from './support/receiver.ts';
import { subscribe, untilStatus } from './support/subscriptions.ts';

/**
 * docs/receivers.md's signature checks, each run in its own language (where
 * that runtime is installed) against a real call of the service, and against
 * the same call forged three ways.
 */

const page = readFileSync('docs/receivers.md', 'utf8');
const snippet = (language: string) => {
  const block = new RegExp('```' + language + '\\n([\\s\\S]*?)```').exec(page)?.[1];
  if (block === undefined) throw new Error(`docs/receivers.md has no ${language} block`);
  return block;
};

/** A runnable program around each snippet: arguments body file, signature ('-' for none), secret; prints true or false. */
const languages = [
  {
    language: 'ts',
    installed: true,
    file: 'verify.ts',
    program: (code: string) =>
      `${code}\nimport { readFileSync } from 'node:fs';\nconst [file, signature, secret] = process.argv.slice(2);\nconsole.log(isFromTheService(readFileSync(file!), signature === '-' ? undefined : signature, secret!));\n`,
    command: (file: string) => [process.execPath, file],
  },
  {
    language: 'python',
    installed: spawnSync('python3', ['--version']).status === 0,
    file: 'verify.py',
    program: (code: string) =>
      `${code}\nimport sys\nbody = open(sys.argv[1], "rb").read()\nsignature = None if sys.argv[2] == "-" else sys.argv[2]\nprint("true" if is_from_the_service(body, signature, sys.argv[3]) else "false")\n`,
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
      return `${imports.join('\n')}\n\npublic class Verify {\n${method}\n  public static void main(String[] args) throws Exception {\n    byte[] body = java.nio.file.Files.readAllBytes(java.nio.file.Path.of(args[0]));\n    System.out.println(isFromTheService(body, args[1].equals("-") ? null : args[1], args[2]));\n  }\n}\n`;
    },
    command: (file: string) => ['java', file],
  },
];

const secret = 'receiver-doc-secret';
let t: TestApp;
let workers: Workers;
let receiver: Receiver;
let dir: string;
let call: { body: Buffer; signature: string };

beforeAll(async () => {
  t = await startTestApp();
  workers = await startWorkers(loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' }), t.database, testSecretsKey, pino({ level: 'silent' }));
  receiver = await startReceiver();
  const { id } = await subscribe(t, 'Patient?family=Verified', receiver.url, { header: [`secret: ${secret}`] });
  await untilStatus(t, id, 'active');
  // A resource with characters a JSON parser would write back differently: the check must be on the raw bytes.
  const patient = (await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Verified', given: ['Zoë', 'Ōsaka \u2028'] }] })).json<{ id: string }>();
  const received = await waitFor(() => receiver.calls.find((each) => each.json.id === patient.id));
  call = { body: received.body, signature: String(received.headers['x-hub-signature']) };
  dir = mkdtempSync(path.join(tmpdir(), 'receivers-doc-'));
}, 60_000);

afterAll(async () => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  await workers?.stop();
  await receiver?.close();
  await t?.close();
});

describe.each(languages)('the $language signature check of docs/receivers.md', ({ language, installed, file, program, command }) => {
  it.skipIf(!installed)(`accepts a real call and refuses it forged (skipped where ${language}'s runtime is missing)`, () => {
    const source = path.join(dir, file);
    writeFileSync(source, program(snippet(language)));
    const verdict = (body: Buffer, signature: string, key: string) => {
      const bodyFile = path.join(dir, `${language}-body`);
      writeFileSync(bodyFile, body);
      const [executable, ...args] = command(source);
      const result = spawnSync(executable!, [...args, bodyFile, signature, key], { encoding: 'utf8' });
      expect(result.stderr).toBe('');
      return result.stdout.trim();
    };
    expect(call.signature).toMatch(/^sha256=[0-9a-f]{64}$/);
    expect(verdict(call.body, call.signature, secret)).toBe('true');
    expect(verdict(Buffer.concat([call.body, Buffer.from(' ')]), call.signature, secret)).toBe('false');
    expect(verdict(call.body, call.signature, 'another-secret')).toBe('false');
    expect(verdict(call.body, '-', secret)).toBe('false');
  });
});
