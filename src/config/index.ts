import { z } from 'zod';
import { brokersSetting, type Brokers } from './brokers.ts';

/** How long a subscriber may take to answer a call, unless DELIVERY_RESPONSE_TIMEOUT_MS says otherwise (the API needs it too: a backport-timeout may not exceed it). */
export const defaultResponseTimeoutMs = 15_000;

/** The longest overlap of a signing secret's rotation, 30 days: SECRET_ROTATION_OVERLAP_SECONDS's bound and a rotation's own. */
export const maxSecretRotationOverlapSeconds = 30 * 86_400;

/** true/false/1/0/yes/no, as people write them in environment files. */
const booleanFlag = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'], { error: 'expected true or false' })
  .transform((value) => value === 'true' || value === '1' || value === 'yes');

/** A comma list of non-negative integers ("10000,60000"). */
const millisecondsList = z
  .string()
  .regex(/^\d+(,\d+)*$/, { error: (issue) => `expected a comma list of milliseconds, such as 10000,60000, got '${String(issue.input)}'` })
  .transform((text) => text.split(',').map(Number));

/**
 * A whole number in [min, max], written in digits: z.coerce.number() would
 * take '1e3', ' 8 ' and '0x10', and say of 'abc' "expected number, received
 * NaN". The message says what is expected and what was given.
 */
function wholeNumber(min: number, max?: number) {
  const expected = `expected a whole number ${max === undefined ? `of at least ${min}` : `from ${min} to ${max}`}`;
  return z.string().transform((text, context) => {
    const value = /^\d+$/.test(text) ? Number(text) : Number.NaN;
    if (Number.isSafeInteger(value) && value >= min && (max === undefined || value <= max)) return value;
    context.addIssue({ code: 'custom', message: `${expected}, got '${text}'` });
    return z.NEVER;
  });
}

/** A decimal number above 0 and at most max ("0.5", "50"), written in digits. */
function positiveDecimal(max: number) {
  const expected = `expected a number above 0 and at most ${max}, such as 0.5 or 50`;
  return z.string().transform((text, context) => {
    const value = /^(\d+(\.\d*)?|\.\d+)$/.test(text) ? Number(text) : Number.NaN;
    if (value > 0 && value <= max) return value;
    context.addIssue({ code: 'custom', message: `${expected}, got '${text}'` });
    return z.NEVER;
  });
}

const milliseconds = wholeNumber(1);

const port = wholeNumber(0, 65535);

const postgresUrl = z.url({ protocol: /^postgres(ql)?$/, error: 'expected a postgres:// connection string' });

/** Connections a pool may open; PostgreSQL's default max_connections is 100 for all processes together. */
const poolSize = wholeNumber(1, 1000);

const environmentSchema = z.object({
  DATABASE_URL: postgresUrl.optional(),
  DATABASE_DIRECT_URL: postgresUrl.optional(),
  DATABASE_POOL_SIZE: poolSize.default(10),
  // The event sender holds a connection only for its short queries, never during a call: 10 serve
  // WORKER_CONCURRENCY's 64 subscriptions as fast as 20 did (the figures are in docs/operators.md).
  WORKER_DATABASE_POOL_SIZE: poolSize.default(10),
  PORT: port.default(8080),
  HOST: z.string().min(1).default('127.0.0.1'),
  BASE_URL: z.url({ protocol: /^https?$/, error: 'expected an absolute http(s) URL' }).optional(),
  BOOTSTRAP_API_KEY: z.string().min(16, 'must be at least 16 characters').optional(),
  MIGRATE_ON_START: booleanFlag.default(true),
  API_RATE_LIMIT_PER_MINUTE: wholeNumber(1).default(6000),
  METRICS_PORT: port.optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  EMBEDDED_DATA_DIR: z.string().min(1).default('.data'),
  WEBHOOK_NAMING_SYSTEM: z
    .string()
    .regex(/^[A-Za-z0-9._-]+$/, 'expected one URL path segment (letters, digits, . _ -)')
    .default('webhook'),
  SECRETS_ENCRYPTION_KEY: z
    .base64({ error: 'expected base64 (make one with: openssl rand -base64 32)' })
    .transform((text) => Buffer.from(text, 'base64'))
    .refine((key) => key.length === 32, 'expected 32 bytes, base64-encoded (make one with: openssl rand -base64 32)')
    .optional(),
  DELIVERY_RETRY_DELAYS_MS: millisecondsList.default([10_000, 60_000]),
  DELIVERY_MAX_FAILURES: wholeNumber(1).default(3),
  // The bounds of a subscription's own retry policy (src/subscriptions/retry-policy.ts): 18 attempts is
  // Medplum's bound for its subscription-max-attempts, so that its subscriptions keep their meaning.
  RETRY_POLICY_MAX_ATTEMPTS: wholeNumber(1, 100).default(18),
  // Within webhook.subscriptions' integer columns of milliseconds (about 24.8 days).
  RETRY_POLICY_MIN_DELAY_MS: wholeNumber(1, 2 ** 31 - 1).default(1_000),
  RETRY_POLICY_MAX_DELAY_MS: wholeNumber(1, 2 ** 31 - 1).default(24 * 60 * 60 * 1000),
  BROKERS: brokersSetting.optional(),
  DELIVERY_CONNECT_TIMEOUT_MS: milliseconds.default(5_000),
  DELIVERY_RESPONSE_TIMEOUT_MS: milliseconds.default(defaultResponseTimeoutMs),
  WORKER_CONCURRENCY: wholeNumber(1, 1000).default(64),
  DELIVERY_PARALLEL_CALLS: wholeNumber(1, 100).default(8),
  // Receivers are often shared (one host's endpoints for many subscriptions); uncapped, one worker
  // process could open WORKER_CONCURRENCY × DELIVERY_PARALLEL_CALLS (512) sockets to one of them.
  // 64 is eight subscriptions sending at the default's full parallelism: a hanging subscriber
  // holds 8 of them, and the others at its origin share the 56 left.
  DELIVERY_MAX_CONNECTIONS_PER_ORIGIN: wholeNumber(2).default(64),
  DELIVERY_MAX_CALLS_PER_SECOND: positiveDecimal(100_000).optional(),
  // The bytes of resource versions a worker process's claims hold at once, each counted uncompressed
  // (about its JSON text); the heap holds several times that (the versions parsed, and for each call
  // its body as text and as bytes). A worker process at rest takes about 150 MiB; with the default
  // concurrency, 64 subscriptions of 300 kB resources peaked at 238-263 MiB with 8 MiB, 269 MiB with
  // 12 and 285-291 MiB with 16 (1,391 MiB without a bound), 64 of 8 kB ones at 237 MiB (389 MiB
  // without): 8 MiB keeps the peak under 300 MiB, with room for what it does not count (a
  // notification's _include resources). docs/delivery.md has the measurements.
  DELIVERY_MAX_CLAIMED_BYTES: wholeNumber(1).default(8 * 1024 * 1024),
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: booleanFlag.default(false),
  WEBHOOK_STANDARD_SIGNATURES: booleanFlag.default(false),
  // A day: time for a receiver's owner to deploy the new secret. At most 30 days, the bound a
  // rotation's overlapSeconds has too: an old secret, perhaps a leaked one, signs no longer.
  SECRET_ROTATION_OVERLAP_SECONDS: wholeNumber(0, maxSecretRotationOverlapSeconds).default(86_400),
  SMTP_URL: z.url({ protocol: /^smtps?$/, error: 'expected smtp://… or smtps://…' }).optional(),
  ALERT_EMAIL_FROM: z.email().default('webhooks@localhost'),
  ALERT_EMAIL_INTERVAL_SECONDS: wholeNumber(0).default(3600),
  OAUTH_TOKEN_URL: z.url({ protocol: /^https?$/, error: 'expected an absolute http(s) URL' }).optional(),
  OAUTH_CLIENT_ID: z.string().min(1).optional(),
  OAUTH_CLIENT_SECRET: z.string().min(1).optional(),
  OAUTH_SCOPE: z.string().min(1).optional(),
  OAUTH_AUDIENCE: z.string().min(1).optional(),
  DELIVERY_LOG_RETENTION_DAYS: wholeNumber(1).default(30),
  // The websocket channel (docs/delivery.md, "The websocket channel"): an API process holds at most
  // WEBSOCKET_MAX_CONNECTIONS clients, one key's clients bound at once (whichever process holds them)
  // are at most WEBSOCKET_MAX_CONNECTIONS_PER_KEY, and a client whose unread notifications pass
  // WEBSOCKET_SEND_BUFFER_BYTES is cut off: at most about that much (and one notification) per client.
  WEBSOCKET_MAX_CONNECTIONS: wholeNumber(1).default(1000),
  WEBSOCKET_MAX_CONNECTIONS_PER_KEY: wholeNumber(1).default(20),
  WEBSOCKET_IDLE_TIMEOUT_SECONDS: wholeNumber(2, 86_400).default(60),
  // A connection that binds nothing holds a place of WEBSOCKET_MAX_CONNECTIONS at no cost (a bind takes an API key's
  // token): it has a few seconds to bind, and one address holds at most WEBSOCKET_MAX_UNBOUND_PER_ADDRESS of them, so
  // that one client cannot take every place.
  WEBSOCKET_BIND_TIMEOUT_SECONDS: wholeNumber(1, 300).default(5),
  WEBSOCKET_MAX_UNBOUND_PER_ADDRESS: wholeNumber(1).default(10),
  WEBSOCKET_MAX_MESSAGE_BYTES: wholeNumber(64, 1024 * 1024).default(4096),
  WEBSOCKET_SEND_BUFFER_BYTES: wholeNumber(1024).default(4 * 1024 * 1024),
  WEBSOCKET_BINDING_TOKEN_SECONDS: wholeNumber(1, 86_400).default(300),
});

export type Config = Readonly<{
  databaseUrl: string | undefined;
  /**
   * The server itself when databaseUrl is a transaction-mode pooler (PgBouncer): the sessions
   * that need a session of their own (LISTEN, graphile-worker, migrations) connect here.
   */
  databaseDirectUrl: string | undefined;
  /** Connections of a process's pool for API requests (and one-shot commands). */
  databasePoolSize: number;
  /** Connections of a worker process's pool for its short queries (event sender, jobs, heartbeats). */
  workerDatabasePoolSize: number;
  port: number;
  host: string;
  /** Public base URL without a trailing slash. */
  baseUrl: string;
  bootstrapApiKey: string | undefined;
  migrateOnStart: boolean;
  /** Requests one API key may make per minute; past it, 429 with Retry-After. */
  apiRateLimitPerMinute: number;
  /** Where /metrics is served on its own (on HOST); unset: on the API's port, by a process that runs the API. */
  metricsPort: number | undefined;
  logLevel: z.infer<typeof environmentSchema>['LOG_LEVEL'];
  /** Where the embedded PostgreSQL keeps its data when DATABASE_URL is unset. */
  embeddedDataDir: string;
  /** Last path segment of the system of the subscription identifier tag. */
  webhookNamingSystem: string;
  /** AES-256 key for subscription headers; the embedded default makes and keeps one when unset. */
  secretsEncryptionKey: Buffer | undefined;
  delivery: Readonly<{
    /** Delay before each retry of an event; its length is the number of retries. */
    retryDelaysMs: readonly number[];
    /** Consecutive unsuccessful attempts that move a subscription to error. */
    maxFailures: number;
    /** What a subscription's own retry policy may ask for (RETRY_POLICY_*). */
    retryPolicyBounds: RetryPolicyBounds;
    /** The message brokers subscriptions may publish to, by name (BROKERS; src/config/brokers.ts). */
    brokers: Brokers;
    connectTimeoutMs: number;
    responseTimeoutMs: number;
    /** Jobs in flight per worker process. */
    concurrency: number;
    parallelCalls: number;
    /** Connections one worker process holds to one origin (scheme, host, port) at most; more than parallelCalls. */
    maxConnectionsPerOrigin: number;
    /** Calls a second to one subscriber at most, unless its subscription says; undefined: no limit. */
    maxCallsPerSecond: number | undefined;
    /** Bytes of resource versions (uncompressed, about their JSON text) a worker process's claims hold at once, one version more at most. */
    maxClaimedBytes: number;
    /** Turns the SSRF guard off (development only). */
    allowPrivateNetworks: boolean;
    /** Also sign with the Standard Webhooks headers (webhook-id, webhook-timestamp, webhook-signature). */
    standardSignatures: boolean;
    /** After a signing secret's rotation, calls are signed with the previous secret too for this many seconds, unless the rotation says. */
    secretRotationOverlapSeconds: number;
    logRetentionDays: number;
  }>;
  /** Alert e-mail; without smtpUrl alerts are logged and recorded, not sent. */
  mail: Readonly<{
    smtpUrl: string | undefined;
    from: string;
    /** A subscription's contacts get at most one alert per this many seconds; 0: one per deactivation. */
    intervalSeconds: number;
  }>;
  /** The websocket channel's limits (src/channels/websocket/channel.ts). */
  websocket: WebsocketLimits;
  /** Outbound OAuth 2.0 client credentials, when OAUTH_TOKEN_URL is set. */
  oauth: Readonly<{ tokenUrl: string; clientId: string; clientSecret: string; scope: string | undefined; audience: string | undefined }> | undefined;
}>;

/** What a subscription's own retry policy may ask for: attempts at most, and its delays between these. */
export type RetryPolicyBounds = Readonly<{ maxAttempts: number; minDelayMs: number; maxDelayMs: number }>;

export type WebsocketLimits = Readonly<{
  /** Clients one API process holds at most (bound or not). */
  maxConnections: number;
  /** Clients bound with one API key's tokens at most, across the API processes. */
  maxConnectionsPerKey: number;
  /** A client left with nothing bound (it unbound it), or that does not answer pings, for this long is closed. */
  idleTimeoutMs: number;
  /** A new client that has bound nothing this long after connecting is closed. */
  bindTimeoutMs: number;
  /** Clients with nothing bound from one remote address at most; past it a new one is closed. */
  maxUnboundPerAddress: number;
  /** The longest message a client may send (a bind-with-token is about 100 bytes). */
  maxMessageBytes: number;
  /** Bytes waiting to be sent to one client past which it is cut off (a client that does not read). */
  sendBufferBytes: number;
  /** How long a $get-ws-binding-token token may be used. */
  bindingTokenSeconds: number;
}>;

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Reads the configuration from the environment; a bad value throws a ConfigError naming the variable. */
export function loadConfig(environment: NodeJS.ProcessEnv = process.env): Config {
  // An empty variable (FOO= in an env file) means "not set".
  const present = Object.fromEntries(Object.entries(environment).filter(([, value]) => value !== ''));
  const parsed = environmentSchema.safeParse(present);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
    throw new ConfigError(`Invalid configuration:\n  ${problems.join('\n  ')}`);
  }
  const env = parsed.data;
  if (env.OAUTH_TOKEN_URL !== undefined && (env.OAUTH_CLIENT_ID === undefined || env.OAUTH_CLIENT_SECRET === undefined)) {
    throw new ConfigError('Invalid configuration:\n  OAUTH_TOKEN_URL is set, so OAUTH_CLIENT_ID and OAUTH_CLIENT_SECRET are required');
  }
  if (env.DATABASE_DIRECT_URL !== undefined && env.DATABASE_URL === undefined) {
    throw new ConfigError(
      'Invalid configuration:\n  DATABASE_DIRECT_URL is set, so DATABASE_URL is required: the direct URL is for the sessions that bypass the pooler DATABASE_URL names',
    );
  }
  if (env.RETRY_POLICY_MIN_DELAY_MS > env.RETRY_POLICY_MAX_DELAY_MS) {
    throw new ConfigError(
      `Invalid configuration:\n  RETRY_POLICY_MIN_DELAY_MS (${env.RETRY_POLICY_MIN_DELAY_MS}) must not be greater than RETRY_POLICY_MAX_DELAY_MS (${env.RETRY_POLICY_MAX_DELAY_MS})`,
    );
  }
  if (env.DELIVERY_MAX_CONNECTIONS_PER_ORIGIN <= env.DELIVERY_PARALLEL_CALLS) {
    throw new ConfigError(
      `Invalid configuration:\n  DELIVERY_MAX_CONNECTIONS_PER_ORIGIN (${env.DELIVERY_MAX_CONNECTIONS_PER_ORIGIN}) must be greater than DELIVERY_PARALLEL_CALLS (${env.DELIVERY_PARALLEL_CALLS}): ` +
        'else one subscription that hangs holds every connection to its origin, and the other subscriptions there wait',
    );
  }
  return {
    databaseUrl: env.DATABASE_URL,
    databaseDirectUrl: env.DATABASE_DIRECT_URL,
    databasePoolSize: env.DATABASE_POOL_SIZE,
    workerDatabasePoolSize: env.WORKER_DATABASE_POOL_SIZE,
    port: env.PORT,
    host: env.HOST,
    baseUrl: (env.BASE_URL ?? `http://localhost:${env.PORT}`).replace(/\/+$/, ''),
    bootstrapApiKey: env.BOOTSTRAP_API_KEY,
    migrateOnStart: env.MIGRATE_ON_START,
    apiRateLimitPerMinute: env.API_RATE_LIMIT_PER_MINUTE,
    metricsPort: env.METRICS_PORT,
    logLevel: env.LOG_LEVEL,
    embeddedDataDir: env.EMBEDDED_DATA_DIR,
    webhookNamingSystem: env.WEBHOOK_NAMING_SYSTEM,
    secretsEncryptionKey: env.SECRETS_ENCRYPTION_KEY,
    delivery: {
      retryDelaysMs: env.DELIVERY_RETRY_DELAYS_MS,
      maxFailures: env.DELIVERY_MAX_FAILURES,
      brokers: env.BROKERS ?? {},
      retryPolicyBounds: { maxAttempts: env.RETRY_POLICY_MAX_ATTEMPTS, minDelayMs: env.RETRY_POLICY_MIN_DELAY_MS, maxDelayMs: env.RETRY_POLICY_MAX_DELAY_MS },
      connectTimeoutMs: env.DELIVERY_CONNECT_TIMEOUT_MS,
      responseTimeoutMs: env.DELIVERY_RESPONSE_TIMEOUT_MS,
      concurrency: env.WORKER_CONCURRENCY,
      parallelCalls: env.DELIVERY_PARALLEL_CALLS,
      maxConnectionsPerOrigin: env.DELIVERY_MAX_CONNECTIONS_PER_ORIGIN,
      maxCallsPerSecond: env.DELIVERY_MAX_CALLS_PER_SECOND,
      maxClaimedBytes: env.DELIVERY_MAX_CLAIMED_BYTES,
      allowPrivateNetworks: env.WEBHOOK_ALLOW_PRIVATE_NETWORKS,
      standardSignatures: env.WEBHOOK_STANDARD_SIGNATURES,
      secretRotationOverlapSeconds: env.SECRET_ROTATION_OVERLAP_SECONDS,
      logRetentionDays: env.DELIVERY_LOG_RETENTION_DAYS,
    },
    websocket: {
      maxConnections: env.WEBSOCKET_MAX_CONNECTIONS,
      maxConnectionsPerKey: env.WEBSOCKET_MAX_CONNECTIONS_PER_KEY,
      idleTimeoutMs: env.WEBSOCKET_IDLE_TIMEOUT_SECONDS * 1000,
      bindTimeoutMs: env.WEBSOCKET_BIND_TIMEOUT_SECONDS * 1000,
      maxUnboundPerAddress: env.WEBSOCKET_MAX_UNBOUND_PER_ADDRESS,
      maxMessageBytes: env.WEBSOCKET_MAX_MESSAGE_BYTES,
      sendBufferBytes: env.WEBSOCKET_SEND_BUFFER_BYTES,
      bindingTokenSeconds: env.WEBSOCKET_BINDING_TOKEN_SECONDS,
    },
    mail: { smtpUrl: env.SMTP_URL, from: env.ALERT_EMAIL_FROM, intervalSeconds: env.ALERT_EMAIL_INTERVAL_SECONDS },
    oauth:
      env.OAUTH_TOKEN_URL === undefined
        ? undefined
        : {
            tokenUrl: env.OAUTH_TOKEN_URL,
            clientId: env.OAUTH_CLIENT_ID!,
            clientSecret: env.OAUTH_CLIENT_SECRET!,
            scope: env.OAUTH_SCOPE,
            audience: env.OAUTH_AUDIENCE,
          },
  };
}
