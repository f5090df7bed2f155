import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { pendingMigrations } from '../../db/migrations.ts';

export type HealthRoutesOptions = { pool: pg.Pool };

/** Liveness and readiness probes; no API key needed. */
export const healthRoutes: FastifyPluginAsync<HealthRoutesOptions> = async (app, { pool }) => {
  app.get('/healthz', { schema: { summary: 'Liveness: the process answers' } }, async () => ({ status: 'ok' }));

  app.get('/readyz', { schema: { summary: 'Readiness: the database answers and its migrations are current' } }, async (request, reply) => {
    try {
      const pending = await pendingMigrations(pool);
      if (pending.length > 0) return reply.code(503).send({ status: 'not ready', reason: 'pending migrations', pending });
      return { status: 'ready' };
    } catch (error) {
      request.log.warn({ err: error }, 'readiness check failed');
      return reply.code(503).send({ status: 'not ready', reason: 'database unreachable' });
    }
  });
};
