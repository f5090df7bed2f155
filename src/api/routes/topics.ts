import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsync } from 'fastify';
import { z } from 'zod';
import type { Db } from '../../db/database.ts';
import { notFound } from '../../fhir/outcome.ts';
import { listTopics, type StoredTopic } from '../../topics/store.ts';
import { fhirJson } from '../errors.ts';
import { bundle, commonRefusals, fhirOperation, operationOutcome, resource } from '../schemas.ts';

export type TopicRoutesOptions = { db: Db; serviceBase: string };

/**
 * The topics a client may subscribe to, as the operator added them: R5
 * SubscriptionTopic resources (R4 has no such type; the Backport IG's
 * clients read R5's), read-only. The CapabilityStatement names the active
 * ones; these give their triggers, filters and shapes.
 */
export const topicRoutes: FastifyPluginAsync<TopicRoutesOptions> = async (app, { db, serviceBase }) => {
  app.get<{ Querystring: { url?: string; status?: string } }>(
    '/SubscriptionTopic',
    {
      schema: {
        summary: 'The topics offered for topic-based subscriptions (R5 SubscriptionTopic, as added by the operator)',
        ...fhirOperation('Subscriptions', 'searchSubscriptionTopics'),
        querystring: z.object({
          url: z.string().optional().describe("The topic's canonical URL"),
          status: z.enum(['active', 'retired']).optional().describe('retired: no new subscriptions'),
        }),
        response: { 200: bundle.describe('A searchset Bundle of SubscriptionTopic resources'), ...commonRefusals },
      },
    },
    async (request, reply) => {
      const topics = (await listTopics(db)).filter(
        (topic) => (request.query.url === undefined || topic.url === request.query.url) && (request.query.status === undefined || topic.status === request.query.status),
      );
      return reply.type(fhirJson).send({
        resourceType: 'Bundle',
        id: randomUUID(),
        type: 'searchset',
        total: topics.length,
        entry: topics.map((topic) => ({ fullUrl: `${serviceBase}/SubscriptionTopic/${topic.id}`, resource: asServed(topic), search: { mode: 'match' } })),
      });
    },
  );

  app.get<{ Params: { id: string } }>(
    '/SubscriptionTopic/:id',
    {
      schema: {
        summary: 'A topic (R5 SubscriptionTopic)',
        ...fhirOperation('Subscriptions', 'readSubscriptionTopic'),
        params: z.object({ id: z.string().describe("The topic's id (its entry's fullUrl in the search)") }),
        response: { 200: resource.describe('A SubscriptionTopic'), ...commonRefusals, 404: operationOutcome.describe('Not known') },
      },
    },
    async (request, reply) => {
      const topic = (await listTopics(db)).find((candidate) => candidate.id === request.params.id);
      if (topic === undefined) throw notFound(`SubscriptionTopic/${request.params.id} is not known`);
      return reply.type(fhirJson).send(asServed(topic));
    },
  );
};

/** The definition as the operator gave it, with the service's id, and retired once the operator retired it. */
function asServed(topic: StoredTopic): Record<string, unknown> {
  return { ...topic.definition, id: topic.id, ...(topic.status === 'retired' ? { status: 'retired' } : {}) };
}
