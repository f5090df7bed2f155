import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';

/**
 * This process's environment for a child command, without what Vitest adds
 * (VITEST*, Vite's BASE_URL, MODE, …) and without the suite's database, so
 * that the child behaves as it would in a terminal.
 */
export function childEnvironment(overrides: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const inherited = Object.entries(process.env).filter(([key]) => !/^(VITEST.*|TEST_DATABASE_URL|DATABASE_URL|BASE_URL|NODE_ENV|MODE|DEV|PROD|SSR)$/.test(key));
  return { ...Object.fromEntries(inherited), ...overrides };
}

/** The command line's entry file, for a test that runs it with Node (npm run cli runs it with a few flags). */
export const cliEntry = 'src/cli/main.ts';

export type Finished = { exitCode: number | null; output: string };

/** Runs a command to its end, `input` on its standard input (none without); output is stdout and stderr interleaved. */
export function runCommand(command: string, args: string[], env: NodeJS.ProcessEnv, input?: string): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const child =
      input === undefined ? spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] }) : spawn(command, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
    child.stdin?.end(input);
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('error', reject);
    child.once('close', (exitCode) => resolve({ exitCode, output }));
  });
}

export type Running = {
  child: ChildProcess;
  /** Everything printed so far. */
  output(): string;
  /** Resolves once the output matches, rejects if the command ends first. */
  waitFor(pattern: RegExp): Promise<RegExpExecArray>;
  /** Signals the whole process group, as Ctrl-C in a terminal does. */
  interrupt(signal?: NodeJS.Signals): void;
  exited: Promise<number | null>;
};

const started = new Set<Running>();

/** Starts a long-running command in a process group of its own, as a terminal's foreground job. */
export function startCommand(command: string, args: string[], env: NodeJS.ProcessEnv): Running {
  const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let output = '';
  const listeners = new Set<() => void>();
  const collect = (chunk: Buffer) => {
    output += chunk.toString();
    for (const listener of listeners) listener();
  };
  child.stdout.on('data', collect);
  child.stderr.on('data', collect);
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  let alive = true;
  void exited.then(() => (alive = false));
  const handle: Running = {
    child,
    output: () => output,
    waitFor: (pattern) =>
      new Promise((resolve, reject) => {
        const check = () => {
          const match = pattern.exec(output);
          if (match) {
            listeners.delete(check);
            resolve(match);
          }
        };
        listeners.add(check);
        check();
        void exited.then((code) => reject(new Error(`${command} ${args.join(' ')} exited with ${code} before printing ${pattern}:\n${output}`)));
      }),
    interrupt: (signal = 'SIGINT') => {
      if (alive) process.kill(-child.pid!, signal);
    },
    exited,
  };
  started.add(handle);
  return handle;
}

/**
 * For afterAll: stops every command a test started and left running (a failed
 * test does), by Ctrl-C and, after 30 s, SIGKILL, so that none outlives the suite.
 */
export async function stopStartedCommands(): Promise<void> {
  for (const command of started) {
    command.interrupt('SIGINT');
    const stopped = await Promise.race([command.exited.then(() => true), new Promise((resolve) => setTimeout(resolve, 30_000, false))]);
    if (!stopped) command.interrupt('SIGKILL');
  }
  started.clear();
}

/**
 * Removes the clusters that root kept under /var/lib/fhir-webhooks for data
 * folders inside `parent` (they are named after it), for a test's afterAll.
 */
export async function removeStagedClusters(parent: string): Promise<void> {
  const stagingRoot = '/var/lib/fhir-webhooks';
  if (!existsSync(stagingRoot)) return;
  for (const entry of await readdir(stagingRoot)) {
    if (entry.startsWith(`${path.basename(parent)}-`)) await rm(path.join(stagingRoot, entry), { recursive: true, force: true });
  }
}
