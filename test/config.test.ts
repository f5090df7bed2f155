import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config/index.ts';

describe('configuration from the environment', () => {
  it('has the documented defaults', () => {
    expect(loadConfig({})).toEqual({
      databaseUrl: undefined,
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
        connectTimeoutMs: 5_000,
        responseTimeoutMs: 15_000,
        concurrency: 64,
        parallelCalls: 8,
        allowPrivateNetworks: false,
        standardSignatures: false,
        logRetentionDays: 30,
      },
      mail: { smtpUrl: undefined, from: 'webhooks@localhost' },
      oauth: undefined,
    });
  });

  it('derives BASE_URL from PORT, trims a trailing slash, and treats empty values as unset', () => {
    expect(loadConfig({ PORT: '9000' }).baseUrl).toBe('http://localhost:9000');
    expect(loadConfig({ BASE_URL: 'https://fhir.example.org/' }).baseUrl).toBe('https://fhir.example.org');
    expect(loadConfig({ DATABASE_URL: '', MIGRATE_ON_START: 'false' })).toMatchObject({ databaseUrl: undefined, migrateOnStart: false });
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

  it.each([
    ['PORT', 'eighty'],
    ['PORT', '70000'],
    ['DATABASE_URL', 'mysql://localhost/db'],
    ['BASE_URL', 'localhost:8080'],
    ['MIGRATE_ON_START', 'maybe'],
    ['LOG_LEVEL', 'loud'],
    ['BOOTSTRAP_API_KEY', 'short'],
    ['SECRETS_ENCRYPTION_KEY', 'c2hvcnQ='],
    ['SECRETS_ENCRYPTION_KEY', 'not base64!'],
    ['WEBHOOK_NAMING_SYSTEM', 'a/b'],
    ['DELIVERY_RETRY_DELAYS_MS', '10s,1m'],
    ['DELIVERY_MAX_FAILURES', '0'],
    ['WEBHOOK_ALLOW_PRIVATE_NETWORKS', 'sometimes'],
    ['SMTP_URL', 'http://mail'],
    ['ALERT_EMAIL_FROM', 'nobody'],
    ['OAUTH_TOKEN_URL', 'token-endpoint'],
  ])('refuses %s=%s with a message naming the variable', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`^Invalid configuration:\\n  ${name}: `));
  });
});
