import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import pino from 'pino';
import { buildApp, type AppOptions } from '../../src/api/app.ts';
import { apiKeyScopes, createApiKey } from '../../src/auth/api-keys.ts';
import { createMetrics, type Metrics } from '../../src/metrics/metrics.ts';
import { createTestDatabase, type TestDatabase } from './database.ts';
import { freePort } from './receiver.ts';

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
  /** The app's base URL (baseUrl, or its own address on loopback with `{ listen: true }`) and FHIR base under it. */
  baseUrl: string;
  serviceBase: string;
  /** A request under /fhir/resources with the API key and a FHIR JSON body. */
  fhir(method: InjectOptions['method'], path: string, body?: unknown, headers?: Record<string, string>): Promise<LightMyRequestResponse>;
  close(): Promise<void>;
};

/**
 * The API on its own test database, driven with Fastify's inject (no socket
 * needed); serving /metrics if asked. With `listen`, it also listens on a
 * loopback port and names itself by that address in its links, for a client
 * that follows them (fhir-kit-client's nextPage). With `outbound`, the
 * settings of the calls the API makes itself ($reactivate, and the default
 * overlap of $rotate-secret); with `websocket`, the websocket channel's limits. With `logger`,
 * the app logs there.
 */
export async function startTestApp(
  options: { metrics?: boolean; listen?: boolean; outbound?: AppOptions['outbound']; logger?: AppOptions['logger']; websocket?: AppOptions['websocket'] } = {},
): Promise<TestApp> {
  const database = await createTestDatabase();
  const metrics = options.metrics === true ? createMetrics(database.db) : undefined;
  const port = options.listen === true ? await freePort() : undefined;
  const appBaseUrl = port === undefined ? baseUrl : `http://127.0.0.1:${port}`;
  const app = await buildApp({
    database,
    baseUrl: appBaseUrl,
    webhookNamingSystem: 'webhook',
    secretsEncryptionKey: testSecretsKey,
    logger: options.logger ?? pino({ level: 'silent' }),
    metrics,
    outbound: options.outbound,
    websocket: options.websocket,
  });
  if (port !== undefined) await app.listen({ port, host: '127.0.0.1' });
  const { key: apiKey } = await createApiKey(database.db, 'test', apiKeyScopes);
  return {
    app,
    database,
    metrics,
    apiKey,
    baseUrl: appBaseUrl,
    serviceBase: `${appBaseUrl}/fhir/resources`,
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
