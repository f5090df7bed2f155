import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { createServer, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { jsonSchemaTransform, validatorCompiler } from 'fastify-type-provider-zod';
import packageJson from '../../package.json' with { type: 'json' };
import type { DatabaseHandle } from '../db/database.ts';
import { FhirError, operationOutcome } from '../fhir/outcome.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { createSecretBox } from '../subscriptions/secrets.ts';
import { requireApiKey } from './authentication.ts';
import { installErrorHandlers, sendOutcome, unservedFormat } from './errors.ts';
import { installJsonBodyParser } from './json-body.ts';
import { rawQueryOf } from './raw-query.ts';
import { splitQuery } from '../search/query.ts';
import { bundleRoutes } from './routes/bundles.ts';
import { consoleData, consolePage } from './routes/console.ts';
import { healthRoutes } from './routes/health.ts';
import { metadataRoutes } from './routes/metadata.ts';
import { metricsRoutes } from './routes/metrics.ts';
import { resourceRoutes } from './routes/resources.ts';
import { searchRoutes } from './routes/search.ts';
import { subscriptionRoutes } from './routes/subscriptions/index.ts';
import { topicRoutes } from './routes/topics.ts';
import { registerWebsocketRoutes } from './routes/websocket.ts';
import { createWebsocketServer } from '../channels/websocket/server.ts';
import { defaultResponseTimeoutMs, loadConfig, type Config, type WebsocketLimits } from '../config/index.ts';
import { createCallContext } from '../dispatch/subscriber.ts';
import { numberMissedEvents } from '../db/sql/number-missed-events.ts';
import { listenForEvents } from '../dispatch/events/sender.ts';
import { keepWorkerPoolAlive } from '../dispatch/liveness.ts';
import { createMetrics } from '../metrics/metrics.ts';

export type AppOptions = {
  database: DatabaseHandle;
  /** Public base URL of the service, without a trailing slash. */
  baseUrl: string;
  /** Last path segment of the subscription identifier tag's system. */
  webhookNamingSystem: string;
  /** AES-256 key for the subscriptions' headers and signing secrets. */
  secretsEncryptionKey: Buffer;
  logger: FastifyBaseLogger;
  /** How long a client may take to send a whole request (default 30 s): a body trickled byte by byte is cut off. */
  requestTimeoutMs?: number;
  /** Requests per minute per API key (default 6,000). */
  rateLimitPerMinute?: number;
  /** Served at /metrics without a key when given. */
  metrics?: Metrics;
  /** DELIVERY_RESPONSE_TIMEOUT_MS: the longest backport-timeout a subscription may ask for. */
  responseTimeoutMs?: number;
  /**
   * How the API calls a subscriber itself, for an operator's $reactivate: the
   * delivery settings (SSRF guard, timeouts, signatures), the OAuth client,
   * and the registry that counts the call. Default: the configuration's
   * defaults (the SSRF guard on), no OAuth, a registry of its own.
   */
  outbound?: { delivery: Config['delivery']; oauth: Config['oauth']; metrics: Metrics };
  /** The websocket channel's limits (WEBSOCKET_*); default: the configuration's defaults. Its clients are counted in outbound.metrics. */
  websocket?: WebsocketLimits;
};

/** FHIR resources can be large (attachments, documents); 10 MiB bounds a single request. */
const bodyLimit = 10 * 1024 * 1024;

export const fhirBasePath = '/fhir/resources';

export async function buildApp({
  database,
  baseUrl,
  webhookNamingSystem,
  secretsEncryptionKey,
  logger,
  requestTimeoutMs = 30_000,
  rateLimitPerMinute = 6000,
  metrics,
  responseTimeoutMs = defaultResponseTimeoutMs,
  outbound = { delivery: loadConfig({}).delivery, oauth: undefined, metrics: createMetrics() },
  websocket = loadConfig({}).websocket,
}: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: logger,
    bodyLimit,
    // A URL that is not valid percent-encoding is refused by the router itself, before any error handler: an OperationOutcome too.
    frameworkErrors: (error, _request, reply) => {
      void sendOutcome(reply, 400, operationOutcome('invalid', error.message));
    },
    // What Node refuses before there is a request (a head over maxHeaderSize, a body trickled past the timeout): an OperationOutcome too.
    clientErrorHandler: answerClientError,
    // Node checks request timeouts every connectionsCheckingInterval (30 s by default): checked every second, a trickled body is cut off on time.
    // A search's query may be 16,384 characters (src/search/query.ts): the request head holds it and the headers (Node's default is 16 KiB in all).
    serverFactory: (handler) =>
      createServer(
        {
          requestTimeout: requestTimeoutMs,
          headersTimeout: requestTimeoutMs,
          connectionsCheckingInterval: Math.min(1_000, requestTimeoutMs),
          maxHeaderSize: 32 * 1024,
        },
        handler,
      ),
  });
  app.setValidatorCompiler(validatorCompiler);
  // Response schemas describe the answers in /docs; they never filter them: a FHIR resource carries
  // any element, and a serializer built from a schema would drop what the schema does not list.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  installJsonBodyParser(app);
  // Answers carry patient data and subscription secrets: never sniffed as another type, never cached, never framed.
  app.addHook('onSend', async (_request, reply) => {
    reply.header('x-content-type-options', 'nosniff');
    reply.header('x-frame-options', 'DENY');
    reply.header('referrer-policy', 'no-referrer');
    if (!reply.hasHeader('cache-control')) reply.header('cache-control', 'no-store');
  });
  installErrorHandlers(app, fhirBasePath);

  await app.register(swagger, {
    openapi: {
      info: {
        title: 'FHIR webhook subscription service',
        version: packageJson.version,
        description:
          'A FHIR R4 resource store whose writes drive webhooks. Every route under /fhir/resources needs an API key (x-api-key) with the read or write scope; answers are application/fhir+json, refusals OperationOutcomes.',
      },
      tags: [
        { name: 'Resources', description: 'FHIR create, read, update, delete, history and vread, for every R4 resource type' },
        { name: 'Search', description: 'FHIR search, answered with searchset Bundles' },
        { name: 'Subscriptions', description: 'Webhook subscriptions: create, switch off, search, read' },
        { name: 'Bundles', description: 'Transaction and batch Bundles' },
        { name: 'Server', description: 'The CapabilityStatement, health, readiness and metrics' },
        { name: 'Console', description: 'The data of the delivery console (/console): subscriptions, their calls and queued work, without secrets' },
      ],
      components: { securitySchemes: { apiKey: { type: 'apiKey', in: 'header', name: 'x-api-key' } } },
      security: [{ apiKey: [] }],
    },
    transform: jsonSchemaTransform,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });

  await app.register(healthRoutes, { pool: database.pool });
  if (metrics !== undefined) await app.register(metricsRoutes, { metrics });
  await app.register(consolePage);

  /** What every route with data has: an API key, and a limit of requests per key. */
  const requireKeyWithinLimit = async (scope: FastifyInstance) => {
    requireApiKey(scope, database.db);
    // After authentication (its hook comes first): counted per key, so one client cannot starve the others.
    await scope.register(rateLimit, {
      max: rateLimitPerMinute,
      timeWindow: 60_000,
      keyGenerator: (request) => request.apiKey?.id ?? request.ip,
      errorResponseBuilder: (_request, context) =>
        new FhirError(429, 'throttled', `More than ${context.max} requests in a minute with this API key: retry after ${context.after}`),
    });
  };

  await app.register(
    async (data) => {
      await requireKeyWithinLimit(data);
      await data.register(consoleData, { db: database.db });
    },
    { prefix: '/console/api' },
  );

  // The websocket channel's clients: on the API's port, outside the API key's scope (a token binds them).
  const websocketServer = createWebsocketServer({
    db: database.db,
    baseUrl,
    limits: websocket,
    metrics: outbound.metrics,
    logger,
    dispatch: {
      // It beats on the pool the API queries through.
      register: (serverId, beat) => keepWorkerPoolAlive(database.pool, { poolId: serverId, kind: 'websocket-server' }, beat, logger),
      // The server itself (not a transaction-mode pooler): the LISTEN's own connection.
      listen: (channel, applicationName, notified, stopping) =>
        listenForEvents(database.directConnectionString ?? database.connectionString, notified, logger, stopping, { channel, applicationName }),
      numberMissedEvents: (subscriptionId) => numberMissedEvents(database.db, subscriptionId),
    },
  });
  await registerWebsocketRoutes(app, { server: websocketServer, maxMessageBytes: websocket.maxMessageBytes });

  const serviceBase = `${baseUrl}${fhirBasePath}`;
  const subscriptions = {
    box: createSecretBox(secretsEncryptionKey),
    baseUrl,
    namingSystem: webhookNamingSystem,
    responseTimeoutMs,
    retryPolicyBounds: outbound.delivery.retryPolicyBounds,
    brokers: outbound.delivery.brokers,
  };
  const calls = createCallContext({ db: database.db, box: subscriptions.box, baseUrl, namingSystem: webhookNamingSystem, logger, ...outbound });
  app.addHook('onClose', () => calls.close());
  await app.register(
    async (fhir) => {
      await requireKeyWithinLimit(fhir);
      // Answers are FHIR JSON: a client that takes only XML (or RDF) is told so, not sent JSON it cannot read.
      // _format as sent: Fastify's query parser would read the '+' of application/fhir+json as a space.
      fhir.addHook('onRequest', async (request) => {
        // Every FHIR request passes here: its query is split only when it names a _format.
        const format = request.url.includes('_format') ? splitQuery(rawQueryOf(request.url)).find(([name]) => name === '_format')?.[1] : undefined;
        const refusal = unservedFormat(request.headers.accept, format);
        if (refusal !== undefined) throw refusal;
      });
      // FHIR bodies are JSON; anything else is 415, not a string that fails validation later.
      fhir.removeContentTypeParser('text/plain');
      await fhir.register(metadataRoutes, { db: database.db, serviceBase, softwareVersion: packageJson.version });
      await fhir.register(subscriptionRoutes, {
        db: database.db,
        serviceBase,
        context: subscriptions,
        calls: calls.context,
        bindingTokenSeconds: websocket.bindingTokenSeconds,
      });
      await fhir.register(topicRoutes, { db: database.db, serviceBase });
      await fhir.register(bundleRoutes, { db: database.db, serviceBase, subscriptions });
      await fhir.register(searchRoutes, { db: database.db, serviceBase });
      await fhir.register(resourceRoutes, { db: database.db, serviceBase });
    },
    { prefix: fhirBasePath },
  );
  return app;
}

/** Node's refusals of a connection's request, before Fastify has one: the status Node means, with an OperationOutcome saying why. */
function answerClientError(error: Error & { code?: string }, socket: Duplex): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const [status, text] =
    error.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'The request line and headers pass 32 KiB: send a long search as POST /{Type}/_search with a form body']
      : error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'The request was not received in time']
        : [400, 'The request is not valid HTTP'];
  const body = JSON.stringify(operationOutcome(status === 431 ? 'too-costly' : 'invalid', text));
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/fhir+json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}
