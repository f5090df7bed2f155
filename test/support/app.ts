import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import pino from 'pino';
import { buildApp } from '../../src/api/app.ts';
import { createApiKey } from '../../src/auth/api-keys.ts';
import { createMetrics, type Metrics } from '../../src/metrics/metrics.ts';
import { createTestDatabase, type TestDatabase } from './database.ts';

export const baseUrl = 'http://fhir.test';
export const serviceBase = `${baseUrl}/fhir/resources`;
/** A fixed key, so tests can decrypt what the service stored. */
export const testSecretsKey = Buffer.alloc(32, 7);

export type TestApp = {
  app: FastifyInstance;
  database: TestDatabase;
  /** The registry the app serves at /metrics, for workers to count into: with `{ metrics: true }` only. */
  metrics: Metrics | undefined;
  apiKey: string;
  /** A request under /fhir/resources with the API key and a FHIR JSON body. */
  fhir(method: InjectOptions['method'], path: string, body?: unknown, headers?: Record<string, string>): Promise<LightMyRequestResponse>;
  close(): Promise<void>;
};

/** The API on its own test database, driven with Fastify's inject (no socket needed); serving /metrics if asked. */
export async function startTestApp(options: { metrics?: boolean } = {}): Promise<TestApp> {
  const database = await createTestDatabase();
  const metrics = options.metrics === true ? createMetrics(database.db) : undefined;
  const app = await buildApp({ database, baseUrl, webhookNamingSystem: 'webhook', secretsEncryptionKey: testSecretsKey, logger: pino({ level: 'silent' }), metrics });
  const { key: apiKey } = await createApiKey(database.db, 'test');
  return {
    app,
    database,
    metrics,
    apiKey,
    fhir: (method, path, body, headers = {}) =>
      app.inject({
        method,
        url: `/fhir/resources${path}`,
        headers: { 'x-api-key': apiKey, ...(body === undefined ? {} : { 'content-type': 'application/fhir+json' }), ...headers },
        ...(body === undefined ? {} : { payload: typeof body === 'string' ? body : JSON.stringify(body) }),
      }),
    close: async () => {
      await app.close();
      await database.drop();
    },
  };
}
