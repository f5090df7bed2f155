import type { Socket } from 'node:net';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config/index.ts';
import { connectDatabase } from '../../src/db/database.ts';
import { applyMigrations } from '../../src/db/migrations.ts';
import { startService } from '../../src/service.ts';
import { childEnvironment, cliEntry, startCommand, stopStartedCommands } from '../support/commands.ts';
import { createTestDatabase, type TestDatabase } from '../support/database.ts';
import { freePort } from '../support/receiver.ts';

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => {
  await stopStartedCommands();
  await database.drop();
});

const logger = pino({ level: 'silent' });

describe('starting the service on a shared database', () => {
  it('refuses to start without SECRETS_ENCRYPTION_KEY, saying how to make one', async () => {
    const config = loadConfig({ DATABASE_URL: database.url, PORT: '0', BOOTSTRAP_API_KEY: 'bootstrap-key-0123456789' });
    const start = startService(config, logger);
    await expect(start).rejects.toThrow(ConfigError);
    await expect(start).rejects.toThrow(/SECRETS_ENCRYPTION_KEY is required with DATABASE_URL.*openssl rand -base64 32/s);
  });

  it('starts with a key, registers BOOTSTRAP_API_KEY and serves it', async () => {
    const config = loadConfig({
      DATABASE_URL: database.url,
      PORT: '0',
      BOOTSTRAP_API_KEY: 'bootstrap-key-0123456789',
      SECRETS_ENCRYPTION_KEY: Buffer.alloc(32, 1).toString('base64'),
    });
    const service = await startService(config, logger);
    try {
      const response = await fetch(`${service.address}/fhir/resources/metadata`, { headers: { 'x-api-key': 'bootstrap-key-0123456789' } });
      expect(response.status).toBe(200);
    } finally {
      await service.close();
    }
  });
});

describe('stopping the service', () => {
  it('exits promptly after it logs stopped on SIGTERM (nothing holds the event loop)', { timeout: 60_000 }, async () => {
    const service = startCommand(
      process.execPath,
      [cliEntry, 'serve'],
      childEnvironment({
        DATABASE_URL: database.url,
        PORT: String(await freePort()),
        HOST: '127.0.0.1',
        LOG_LEVEL: 'info',
        BOOTSTRAP_API_KEY: 'bootstrap-key-0123456789',
        SECRETS_ENCRYPTION_KEY: Buffer.alloc(32, 1).toString('base64'),
      }),
    );
    await service.waitFor(/Listening on/);
    service.interrupt('SIGTERM');
    await service.waitFor(/"msg":"stopped"/);
    const stoppedAt = performance.now();
    expect(await service.exited).toBe(0);
    // The sender's 5 s grace timer once held the process that long after `stopped`.
    expect(performance.now() - stoppedAt).toBeLessThan(2_000);
  });
});

describe('closing the database handle', () => {
  it('ends the pool even when Kysely never used it, and returns once every connection has closed', async () => {
    const handle = connectDatabase(database.url, () => undefined);
    const sockets: Socket[] = [];
    handle.pool.on('connect', (client) => sockets.push((client as unknown as { connection: { stream: Socket } }).connection.stream));
    // What `cli migrate` does: the pool only, never Kysely (whose destroy() alone would leave the pool open).
    await applyMigrations(handle.pool);
    await Promise.all([handle.pool.query('SELECT 1'), handle.pool.query('SELECT 2')]);
    expect(sockets.length).toBeGreaterThanOrEqual(2);
    await handle.close();
    expect(handle.pool.ended).toBe(true);
    expect(sockets.filter((socket) => !socket.closed)).toEqual([]);
  });
});
