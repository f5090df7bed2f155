import { z } from 'zod';

/** true/false/1/0/yes/no, as people write them in environment files. */
const booleanFlag = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'], { error: 'expected true or false' })
  .transform((value) => value === 'true' || value === '1' || value === 'yes');

const environmentSchema = z.object({
  DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/, error: 'expected a postgres:// connection string' }).optional(),
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  HOST: z.string().min(1).default('127.0.0.1'),
  BASE_URL: z.url({ protocol: /^https?$/, error: 'expected an absolute http(s) URL' }).optional(),
  BOOTSTRAP_API_KEY: z.string().min(16, 'must be at least 16 characters').optional(),
  MIGRATE_ON_START: booleanFlag.default(true),
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
});

export type Config = Readonly<{
  databaseUrl: string | undefined;
  port: number;
  host: string;
  /** Public base URL without a trailing slash. */
  baseUrl: string;
  bootstrapApiKey: string | undefined;
  migrateOnStart: boolean;
  logLevel: z.infer<typeof environmentSchema>['LOG_LEVEL'];
  /** Where the embedded PostgreSQL keeps its data when DATABASE_URL is unset. */
  embeddedDataDir: string;
  /** Last path segment of the system of the subscription identifier tag. */
  webhookNamingSystem: string;
  /** AES-256 key for subscription headers; the embedded default makes and keeps one when unset. */
  secretsEncryptionKey: Buffer | undefined;
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
  return {
    databaseUrl: env.DATABASE_URL,
    port: env.PORT,
    host: env.HOST,
    baseUrl: (env.BASE_URL ?? `http://localhost:${env.PORT}`).replace(/\/+$/, ''),
    bootstrapApiKey: env.BOOTSTRAP_API_KEY,
    migrateOnStart: env.MIGRATE_ON_START,
    logLevel: env.LOG_LEVEL,
    embeddedDataDir: env.EMBEDDED_DATA_DIR,
    webhookNamingSystem: env.WEBHOOK_NAMING_SYSTEM,
    secretsEncryptionKey: env.SECRETS_ENCRYPTION_KEY,
  };
}
