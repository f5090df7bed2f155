import { createHash, randomBytes } from 'node:crypto';
import type { Db } from '../db/database.ts';
import type { ApiKeyScope } from '../db/schema.ts';

export type { ApiKeyScope };
export const apiKeyScopes: readonly ApiKeyScope[] = ['read', 'write', 'admin'];

/**
 * A key made without naming its scopes: a client's, which sees only its own
 * subscriptions. admin is given only when asked for by name (the column's
 * default too, since migration 0032).
 */
export const clientScopes: readonly ApiKeyScope[] = ['read', 'write'];

/**
 * Who asks: an API key, and whether it may see and switch off every
 * subscription (the admin scope) or only those it created.
 */
export type Caller = { apiKeyId: string; admin: boolean };

/**
 * The subscriptions a caller may see: all with the admin scope, else those
 * its key created. No caller is an operator (the CLI), who sees them all.
 */
export function visibleTo<Query extends { where: (column: 'created_by_api_key', operator: '=', value: string) => Query }>(
  query: Query,
  caller: Caller | undefined,
): Query {
  return caller === undefined || caller.admin ? query : query.where('created_by_api_key', '=', caller.apiKeyId);
}

export type ApiKeyInfo = { id: string; name: string; createdAt: Date; revokedAt: Date | null; scopes: ApiKeyScope[] };

/** The key that authenticated a request: who it is and what it may do. */
export type ApiKeyIdentity = { id: string; name: string; scopes: ApiKeyScope[] };

/** A new key: a recognisable prefix and 256 random bits. */
export function generateApiKey(): string {
  return `fwk_${randomBytes(32).toString('base64url')}`;
}

function sha256(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/** Registers `key` with every scope (only its digest is stored): the bootstrap key. Registering a known key again changes nothing. */
export async function registerApiKey(db: Db, name: string, key: string): Promise<void> {
  await db
    .insertInto('webhook.api_keys')
    .values({ name, key_sha256: sha256(key), revoked_at: null, scopes: [...apiKeyScopes] })
    .onConflict((conflict) => conflict.column('key_sha256').doNothing())
    .execute();
}

export async function createApiKey(db: Db, name: string, scopes: readonly ApiKeyScope[] = clientScopes): Promise<{ id: string; key: string }> {
  const key = generateApiKey();
  const { id } = await db
    .insertInto('webhook.api_keys')
    .values({ name, key_sha256: sha256(key), revoked_at: null, scopes: [...scopes] })
    .returning('id')
    .executeTakeFirstOrThrow();
  return { id, key };
}

export async function listApiKeys(db: Db): Promise<ApiKeyInfo[]> {
  const rows = await db.selectFrom('webhook.api_keys').select(['id', 'name', 'created_at', 'revoked_at', 'scopes']).orderBy('created_at').execute();
  return rows.map((row) => ({ id: row.id, name: row.name, createdAt: row.created_at, revokedAt: row.revoked_at, scopes: row.scopes }));
}

/** Revokes a key by id; false when no unrevoked key has that id. */
export async function revokeApiKey(db: Db, id: string): Promise<boolean> {
  const result = await db
    .updateTable('webhook.api_keys')
    .set({ revoked_at: new Date() })
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * Gives an unrevoked key other scopes, the key itself unchanged: how a key
 * made before scopes existed (every scope, admin included) becomes a client's
 * again without a new key, its subscriptions staying its own. False when no
 * unrevoked key has that id.
 */
export async function setApiKeyScopes(db: Db, id: string, scopes: readonly ApiKeyScope[]): Promise<boolean> {
  const result = await db
    .updateTable('webhook.api_keys')
    .set({ scopes: [...scopes] })
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** The unrevoked key matching `key`, if any. */
export async function findActiveApiKey(db: Db, key: string): Promise<ApiKeyIdentity | undefined> {
  return db
    .selectFrom('webhook.api_keys')
    .select(['id', 'name', 'scopes'])
    .where('key_sha256', '=', sha256(key))
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
}

export async function hasAnyApiKey(db: Db): Promise<boolean> {
  const row = await db.selectFrom('webhook.api_keys').select('id').limit(1).executeTakeFirst();
  return row !== undefined;
}
