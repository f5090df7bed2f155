import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const dataDir = await mkdtemp(path.join(tmpdir(), 'fhir-webhooks-start-'));
await chmod(dataDir, 0o755);
afterAll(() => rm(dataDir, { recursive: true, force: true }));

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

describe('npm start with no DATABASE_URL', () => {
  it('starts an embedded PostgreSQL, prints a first API key, serves, and stops everything on Ctrl-C', { timeout: 60_000 }, async () => {
    const port = await freePort();
    // Vitest puts Vite's BASE_URL ('/') into process.env; the service must not inherit it.
    const { DATABASE_URL: _database, TEST_DATABASE_URL: _testDatabase, BASE_URL: _viteBase, ...environment } = process.env;
    const child = spawn(process.execPath, ['src/cli.ts', 'serve'], {
      env: { ...environment, EMBEDDED_DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    let output = '';
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const apiKey = await new Promise<string>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        const key = /^API key: (\S+)$/m.exec(output)?.[1];
        if (key && output.includes('Listening on')) resolve(key);
      });
      void exited.then((code) => reject(new Error(`exited with ${code} before serving:\n${output}`)));
    });

    expect(output).toContain(`curl -H 'x-api-key: ${apiKey}' http://localhost:${port}/fhir/resources/metadata`);
    const base = `http://127.0.0.1:${port}`;
    expect(await (await fetch(`${base}/healthz`)).json()).toEqual({ status: 'ok' });
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    const metadata = await fetch(`${base}/fhir/resources/metadata`, { headers: { 'x-api-key': apiKey } });
    expect(metadata.status).toBe(200);
    expect(((await metadata.json()) as { resourceType: string }).resourceType).toBe('CapabilityStatement');
    const pidFile = path.join(dataDir, 'postgres', 'postmaster.pid');
    expect(existsSync(pidFile)).toBe(true);

    child.kill('SIGINT');
    expect(await exited).toBe(0);
    // PostgreSQL removes its pid file as the last step of a clean shutdown.
    expect(existsSync(pidFile)).toBe(false);
    await expect(fetch(`${base}/healthz`)).rejects.toThrow();
  });
});
