import type { FastifyPluginAsync } from 'fastify';
import { z } from 'zod';
import { exposition } from '../../metrics/exposition.ts';
import type { Metrics } from '../../metrics/metrics.ts';

export type MetricsRoutesOptions = { metrics: Metrics };

/** Prometheus metrics on the API's port; no API key needed (METRICS_PORT moves them to a port of their own). */
export const metricsRoutes: FastifyPluginAsync<MetricsRoutesOptions> = async (app, { metrics }) => {
  app.get(
    '/metrics',
    {
      schema: {
        summary: 'Prometheus metrics (text exposition format); docs/operators.md lists them',
        tags: ['Server'],
        operationId: 'metrics',
        security: [],
        produces: ['text/plain'],
        response: { 200: z.string().describe('The text exposition format, version 0.0.4') },
      },
    },
    async (_request, reply) => {
      const { contentType, body } = await exposition(metrics);
      return reply.type(contentType).send(body);
    },
  );
};
