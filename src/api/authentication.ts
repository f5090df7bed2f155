import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Caller } from '../auth/api-keys.ts';
import { findActiveApiKey, type ApiKeyIdentity, type ApiKeyScope } from '../auth/api-keys.ts';
import type { Db } from '../db/database.ts';
import { FhirError } from '../fhir/outcome.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The API key that authenticated the request (its id, name and scopes, never the key). */
    apiKey?: ApiKeyIdentity;
  }
}

/** Requires a valid, unrevoked `x-api-key` on every route of the instance it is added to. */
export function requireApiKey(app: FastifyInstance, db: Db): void {
  app.addHook('onRequest', async (request) => {
    const key = request.headers['x-api-key'];
    if (typeof key !== 'string' || key === '') {
      throw new FhirError(401, 'security', 'Missing x-api-key header');
    }
    const apiKey = await findActiveApiKey(db, key);
    if (!apiKey) throw new FhirError(401, 'security', 'Unknown or revoked API key');
    const needed = scopeNeeded(request.method, request.url);
    if (!apiKey.scopes.includes(needed)) throw new FhirError(403, 'forbidden', `This API key lacks the ${needed} scope (it has ${apiKey.scopes.join(', ')})`);
    request.apiKey = apiKey;
  });
}

/** read for GET, HEAD and searches by POST (…/_search); write for anything else. */
function scopeNeeded(method: string, url: string): ApiKeyScope {
  if (method === 'GET' || method === 'HEAD') return 'read';
  return method === 'POST' && /\/_search(\?|$)/.test(url) ? 'read' : 'write';
}

/** Whose subscriptions a request may see and switch off: its key's own, or all with the admin scope. */
export function callerOf(request: FastifyRequest): Caller {
  const key = request.apiKey!;
  return { apiKeyId: key.id, admin: key.scopes.includes('admin') };
}
