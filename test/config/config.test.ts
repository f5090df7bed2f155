import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config/index.ts';

describe('configuration from the environment', () => {
  it('has the documented defaults', () => {
    expect(loadConfig({})).toEqual({
      databaseUrl: undefined,
      databaseDirectUrl: undefined,
      databasePoolSize: 10,
      workerDatabasePoolSize: 10,
      port: 8080,
      host: '127.0.0.1',
      baseUrl: 'http://localhost:8080',
      bootstrapApiKey: undefined,
      migrateOnStart: true,
      logLevel: 'info',
      embeddedDataDir: '.data',
      webhookNamingSystem: 'webhook',
      secretsEncryptionKey: undefined,
      apiRateLimitPerMinute: 6000,
      delivery: {
        retryDelaysMs: [10_000, 60_000],
        maxFailures: 3,
        retryPolicyBounds: { maxAttempts: 18, minDelayMs: 1_000, maxDelayMs: 86_400_000 },
        brokers: {},
        connectTimeoutMs: 5_000,
        responseTimeoutMs: 15_000,
        concurrency: 64,
        parallelCalls: 8,
        maxConnectionsPerOrigin: 64,
        maxClaimedBytes: 8 * 1024 * 1024,
        allowPrivateNetworks: false,
        standardSignatures: false,
        secretRotationOverlapSeconds: 86_400,
        logRetentionDays: 30,
      },
      websocket: {
        maxConnections: 1000,
        maxConnectionsPerKey: 20,
        idleTimeoutMs: 60_000,
        bindTimeoutMs: 5_000,
        maxUnboundPerAddress: 10,
        maxMessageBytes: 4096,
        sendBufferBytes: 4 * 1024 * 1024,
        bindingTokenSeconds: 300,
      },
      mail: { smtpUrl: undefined, from: 'webhooks@localhost', intervalSeconds: 3600 },
      oauth: undefined,
    });
  });

  it('derives BASE_URL from PORT, trims a trailing slash, and treats empty values as unset', () => {
    expect(loadConfig({ PORT: '9000' }).baseUrl).toBe('http://localhost:9000');
    expect(loadConfig({ BASE_URL: 'https://fhir.example.org/' }).baseUrl).toBe('https://fhir.example.org');
    expect(loadConfig({ DATABASE_URL: '', MIGRATE_ON_START: 'false' })).toMatchObject({ databaseUrl: undefined, migrateOnStart: false });
  });

  it("refuses a retry policy's shortest delay above its longest", () => {
    expect(() => loadConfig({ RETRY_POLICY_MIN_DELAY_MS: '5000', RETRY_POLICY_MAX_DELAY_MS: '1000' })).toThrow(
      /RETRY_POLICY_MIN_DELAY_MS \(5000\) must not be greater than RETRY_POLICY_MAX_DELAY_MS \(1000\)/,
    );
  });

  it('reads BROKERS, and names a bad one by its name and field, never by its URL', () => {
    const brokers = { events: { type: 'nats-jetstream', url: 'nats://user:s3cret@127.0.0.1:4222', subjects: ['fhir.>', 'audit.*.done'] } };
    expect(loadConfig({ BROKERS: JSON.stringify(brokers) }).delivery.brokers).toEqual(brokers);
    const refused = (value: unknown) => {
      try {
        loadConfig({ BROKERS: typeof value === 'string' ? value : JSON.stringify(value) });
      } catch (error) {
        return (error as Error).message;
      }
      return 'accepted';
    };
    expect(refused('{not json')).toContain('BROKERS: expected a JSON object of broker connections by name');
    expect(refused({ Events: brokers.events })).toContain('the broker name "Events" must be lower-case letters, digits and dashes');
    expect(refused({ events: { ...brokers.events, url: 'http://user:s3cret@127.0.0.1' } })).toContain(
      'broker events: url: url must be a nats:// or tls:// URL',
    );
    expect(refused({ events: { ...brokers.events, url: 'http://user:s3cret@127.0.0.1' } })).not.toContain('s3cret');
    expect(refused({ events: { ...brokers.events, subjects: ['fhir.>.x'] } })).toContain(
      'broker events: subjects.0: each of subjects must be a NATS subject or pattern',
    );
    expect(refused({ events: { ...brokers.events, subjects: [] } })).toContain('subjects must name at least one subject or pattern');
    expect(refused({ events: { ...brokers.events, type: 'kafka' } })).toContain('broker events: type: type must be nats-jetstream or rabbitmq');
    const rabbit = { type: 'rabbitmq', url: 'amqps://user:s3cret@rabbit.internal/fhir', exchanges: ['fhir'] };
    expect(loadConfig({ BROKERS: JSON.stringify({ rabbit }) }).delivery.brokers).toEqual({ rabbit });
    expect(refused({ rabbit: { ...rabbit, url: 'nats://user:s3cret@x' } })).toContain('broker rabbit: url: url must be a amqp:// or amqps:// URL');
    expect(refused({ rabbit: { ...rabbit, exchanges: ['a b'] } })).toContain('each of exchanges must be an exchange name');
  });

  it('needs the client credentials when OAUTH_TOKEN_URL is set', () => {
    expect(() => loadConfig({ OAUTH_TOKEN_URL: 'http://127.0.0.1:9/token' })).toThrow(/OAUTH_CLIENT_ID and OAUTH_CLIENT_SECRET are required/);
    expect(loadConfig({ OAUTH_TOKEN_URL: 'http://127.0.0.1:9/token', OAUTH_CLIENT_ID: 'c', OAUTH_CLIENT_SECRET: 's' }).oauth).toEqual({
      tokenUrl: 'http://127.0.0.1:9/token',
      clientId: 'c',
      clientSecret: 's',
      scope: undefined,
      audience: undefined,
    });
  });

  it("takes a direct URL beside DATABASE_URL (a pooler), never alone, and the pools' sizes", () => {
    expect(
      loadConfig({
        DATABASE_URL: 'postgres://app@pgbouncer:6432/fhir',
        DATABASE_DIRECT_URL: 'postgres://app@db:5432/fhir',
        DATABASE_POOL_SIZE: '4',
        WORKER_DATABASE_POOL_SIZE: '3',
      }),
    ).toMatchObject({
      databaseUrl: 'postgres://app@pgbouncer:6432/fhir',
      databaseDirectUrl: 'postgres://app@db:5432/fhir',
      databasePoolSize: 4,
      workerDatabasePoolSize: 3,
    });
    expect(() => loadConfig({ DATABASE_DIRECT_URL: 'postgres://app@db:5432/fhir' })).toThrow(
      new ConfigError(
        'Invalid configuration:\n  DATABASE_DIRECT_URL is set, so DATABASE_URL is required: the direct URL is for the sessions that bypass the pooler DATABASE_URL names',
      ),
    );
  });

  it('keeps more connections to an origin than one subscription may have calls in flight', () => {
    expect(loadConfig({ DELIVERY_PARALLEL_CALLS: '4', DELIVERY_MAX_CONNECTIONS_PER_ORIGIN: '5' }).delivery).toMatchObject({
      parallelCalls: 4,
      maxConnectionsPerOrigin: 5,
    });
    const refusal =
      'Invalid configuration:\n  DELIVERY_MAX_CONNECTIONS_PER_ORIGIN (8) must be greater than DELIVERY_PARALLEL_CALLS (8): ' +
      'else one subscription that hangs holds every connection to its origin, and the other subscriptions there wait';
    expect(() => loadConfig({ DELIVERY_MAX_CONNECTIONS_PER_ORIGIN: '8' })).toThrow(new ConfigError(refusal));
    // Raising the calls in flight past the default cap needs the cap raised too.
    expect(() => loadConfig({ DELIVERY_PARALLEL_CALLS: '64' })).toThrow(
      'DELIVERY_MAX_CONNECTIONS_PER_ORIGIN (64) must be greater than DELIVERY_PARALLEL_CALLS (64)',
    );
    expect(loadConfig({ DELIVERY_PARALLEL_CALLS: '64', DELIVERY_MAX_CONNECTIONS_PER_ORIGIN: '65' }).delivery.maxConnectionsPerOrigin).toBe(65);
  });

  it("takes the bytes of resource versions a worker process's claims may hold", () => {
    expect(loadConfig({ DELIVERY_MAX_CLAIMED_BYTES: '600000' }).delivery.maxClaimedBytes).toBe(600_000);
  });

  it.each([
    ['PORT', 'abc', "expected a whole number from 0 to 65535, got 'abc'"],
    ['PORT', '70000', "expected a whole number from 0 to 65535, got '70000'"],
    ['PORT', '-1', "expected a whole number from 0 to 65535, got '-1'"],
    ['METRICS_PORT', '1e3', "expected a whole number from 0 to 65535, got '1e3'"],
    ['DATABASE_POOL_SIZE', '0x10', "expected a whole number from 1 to 1000, got '0x10'"],
    ['WORKER_DATABASE_POOL_SIZE', ' 8', "expected a whole number from 1 to 1000, got ' 8'"],
    ['API_RATE_LIMIT_PER_MINUTE', '1.5', "expected a whole number of at least 1, got '1.5'"],
    ['DELIVERY_MAX_FAILURES', '0', "expected a whole number of at least 1, got '0'"],
    ['DELIVERY_CONNECT_TIMEOUT_MS', '5s', "expected a whole number of at least 1, got '5s'"],
    ['DELIVERY_RESPONSE_TIMEOUT_MS', 'Infinity', "expected a whole number of at least 1, got 'Infinity'"],
    ['WORKER_CONCURRENCY', '1001', "expected a whole number from 1 to 1000, got '1001'"],
    ['DELIVERY_PARALLEL_CALLS', 'many', "expected a whole number from 1 to 100, got 'many'"],
    ['DELIVERY_MAX_CONNECTIONS_PER_ORIGIN', '1', "expected a whole number of at least 2, got '1'"],
    ['DELIVERY_MAX_CLAIMED_BYTES', '8MiB', "expected a whole number of at least 1, got '8MiB'"],
    ['DELIVERY_MAX_CLAIMED_BYTES', '99999999999999999999', "expected a whole number of at least 1, got '99999999999999999999'"],
    ['DELIVERY_LOG_RETENTION_DAYS', 'thirty', "expected a whole number of at least 1, got 'thirty'"],
    ['DELIVERY_MAX_CALLS_PER_SECOND', 'fast', "expected a number above 0 and at most 100000, such as 0.5 or 50, got 'fast'"],
    ['DELIVERY_MAX_CALLS_PER_SECOND', '0', "expected a number above 0 and at most 100000, such as 0.5 or 50, got '0'"],
    ['DELIVERY_RETRY_DELAYS_MS', '10s,1m', "expected a comma list of milliseconds, such as 10000,60000, got '10s,1m'"],
  ])('says what a numeric setting takes and what it got: %s=%s', (name, value, message) => {
    expect(() => loadConfig({ [name]: value })).toThrow(new ConfigError(`Invalid configuration:\n  ${name}: ${message}`));
  });

  it('takes numbers written in digits, a decimal where one makes sense', () => {
    const config = loadConfig({
      PORT: '0',
      METRICS_PORT: '65535',
      WORKER_CONCURRENCY: '1000',
      DELIVERY_MAX_CALLS_PER_SECOND: '0.5',
      DELIVERY_LOG_RETENTION_DAYS: '7',
    });
    expect(config).toMatchObject({ port: 0, metricsPort: 65535, delivery: { concurrency: 1000, maxCallsPerSecond: 0.5, logRetentionDays: 7 } });
  });

  it.each([
    ['PORT', 'eighty'],
    ['PORT', '70000'],
    ['DATABASE_URL', 'mysql://localhost/db'],
    ['DATABASE_DIRECT_URL', 'db:5432'],
    ['DATABASE_POOL_SIZE', '0'],
    ['WORKER_DATABASE_POOL_SIZE', 'twenty'],
    ['BASE_URL', 'localhost:8080'],
    ['MIGRATE_ON_START', 'maybe'],
    ['LOG_LEVEL', 'loud'],
    ['BOOTSTRAP_API_KEY', 'short'],
    ['SECRETS_ENCRYPTION_KEY', 'c2hvcnQ='],
    ['SECRETS_ENCRYPTION_KEY', 'not base64!'],
    ['WEBHOOK_NAMING_SYSTEM', 'a/b'],
    ['DELIVERY_RETRY_DELAYS_MS', '10s,1m'],
    ['DELIVERY_MAX_FAILURES', '0'],
    ['DELIVERY_MAX_CONNECTIONS_PER_ORIGIN', 'many'],
    ['DELIVERY_MAX_CLAIMED_BYTES', '0'],
    ['DELIVERY_MAX_CLAIMED_BYTES', '8MiB'],
    ['WEBHOOK_ALLOW_PRIVATE_NETWORKS', 'sometimes'],
    ['SMTP_URL', 'http://mail'],
    ['ALERT_EMAIL_FROM', 'nobody'],
    ['OAUTH_TOKEN_URL', 'token-endpoint'],
  ])('refuses %s=%s with a message naming the variable', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`^Invalid configuration:\\n  ${name}: `));
  });
});
