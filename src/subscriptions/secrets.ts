import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { makeDataDir } from '../config/data-dir.ts';
import { ConfigError, type Config } from '../config/index.ts';

/**
 * AES-256-GCM for the subscription secrets at rest (channel headers, signing
 * secret). A sealed value is IV (12 bytes) ‖ tag (16 bytes) ‖ ciphertext.
 */
export type SecretBox = {
  seal(plaintext: string): Buffer;
  open(sealed: Buffer): string;
};

export function createSecretBox(key: Buffer): SecretBox {
  if (key.length !== 32) throw new Error('the secrets encryption key must be 32 bytes');
  return {
    seal(plaintext) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return Buffer.concat([iv, cipher.getAuthTag(), ciphertext]);
    },
    open(sealed) {
      const decipher = createDecipheriv('aes-256-gcm', key, sealed.subarray(0, 12));
      decipher.setAuthTag(sealed.subarray(12, 28));
      return Buffer.concat([decipher.update(sealed.subarray(28)), decipher.final()]).toString('utf8');
    },
  };
}

/** The embedded default's key: made once, kept beside the embedded data, readable by its owner only. */
export async function readOrCreateKeyFile(dataDir: string): Promise<Buffer> {
  const file = path.resolve(dataDir, 'secrets-encryption.key');
  if (existsSync(file)) return Buffer.from((await readFile(file, 'utf8')).trim(), 'base64');
  await makeDataDir(dataDir);
  const key = randomBytes(32);
  await writeFile(file, `${key.toString('base64')}\n`, { mode: 0o600 });
  return key;
}

/**
 * SECRETS_ENCRYPTION_KEY, or with the embedded default a key made once and
 * kept beside the embedded data. A shared database without a key is refused:
 * a key made up per process would leave the stored secrets unreadable. What
 * the service starts with, and what a CLI command that calls a subscriber
 * (`subscriptions reactivate`) decrypts its headers with.
 */
export async function secretsEncryptionKey(config: Config): Promise<Buffer> {
  if (config.secretsEncryptionKey) return config.secretsEncryptionKey;
  if (config.databaseUrl === undefined) return readOrCreateKeyFile(config.embeddedDataDir);
  throw new ConfigError(
    'SECRETS_ENCRYPTION_KEY is required with DATABASE_URL (it encrypts subscription headers at rest). ' +
      'Make one with: openssl rand -base64 32   (or: node -e "console.log(crypto.randomBytes(32).toString(\'base64\'))")',
  );
}
