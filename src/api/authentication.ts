import type { FastifyInstance } from 'fastify';
import { findActiveApiKey } from '../auth/api-keys.ts';
import type { Db } from '../db/database.ts';
import { FhirError } from '../fhir/outcome.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The API key that authenticated the request (its id and name, never the key). */
    apiKey?: { id: string; name: string };
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
    request.apiKey = apiKey;
  });
}
