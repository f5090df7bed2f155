import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config/index.ts';
import { startService } from '../src/service.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database.drop());

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
