import type { FastifyPluginAsync } from 'fastify';
import type pg from 'pg';
import { z } from 'zod';
import { pendingMigrations } from '../../db/migrations.ts';

export type HealthRoutesOptions = { pool: pg.Pool };

/** Liveness and readiness probes; no API key needed. */
export const healthRoutes: FastifyPluginAsync<HealthRoutesOptions> = async (app, { pool }) => {
  app.get(
    '/healthz',
    {
      schema: {
        summary: 'Liveness: the process answers',
        tags: ['Server'],
        operationId: 'liveness',
        security: [],
        response: { 200: z.object({ status: z.literal('ok') }) },
      },
    },
    async () => ({ status: 'ok' }),
  );

  app.get(
    '/readyz',
    {
      schema: {
        summary: 'Readiness: the database answers and its migrations are current',
        tags: ['Server'],
        operationId: 'readiness',
        security: [],
        response: {
          200: z.object({ status: z.literal('ready') }),
          503: z
            .object({ status: z.literal('not ready'), reason: z.string(), pending: z.array(z.string()).optional() })
            .describe('Not ready: the database is unreachable, or migrations are pending'),
        },
      },
    },
    async (request, reply) => {
      try {
        const pending = await pendingMigrations(pool);
        if (pending.length > 0) return reply.code(503).send({ status: 'not ready', reason: 'pending migrations', pending });
        return { status: 'ready' };
      } catch (error) {
        request.log.warn({ err: error }, 'readiness check failed');
        return reply.code(503).send({ status: 'not ready', reason: 'database unreachable' });
      }
    },
  );
};
