import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsync } from 'fastify';
import { z } from 'zod';
import type { Db } from '../../db/database.ts';
import { notFound } from '../../fhir/outcome.ts';
import { topicElement, topicOnR4 } from '../../topics/backport.ts';
import { topicAsBasic } from '../../topics/r4-representation.ts';
import { listTopics } from '../../topics/store.ts';
import { fhirJson } from '../errors.ts';
import { bundle, commonRefusals, fhirOperation, operationOutcome, resource } from '../schemas.ts';

export type TopicRoutesOptions = { db: Db; serviceBase: string };

/** What /docs shows a topic as: the example topic's Basic, shortened. */
const basicExample = {
  resourceType: 'Basic',
  id: '1',
  meta: { profile: [topicOnR4.profile] },
  extension: [
    { url: topicOnR4.artifactUrl, valueUri: 'http://example.org/topics/encounter-complete' },
    { url: topicElement('url'), valueUri: 'http://example.org/topics/encounter-complete' },
    { url: topicElement('version'), valueString: '1.0.0' },
    { url: topicElement('title'), valueString: 'Encounter complete' },
    {
      url: topicElement('resourceTrigger'),
      extension: [
        { url: 'resource', valueUri: 'http://hl7.org/fhir/StructureDefinition/Encounter' },
        { url: 'supportedInteraction', valueCode: 'create' },
        { url: 'supportedInteraction', valueCode: 'update' },
        {
          url: 'queryCriteria',
          extension: [
            { url: 'previous', valueString: 'status:not=finished' },
            { url: 'resultForCreate', valueCode: 'test-passes' },
            { url: 'current', valueString: 'status=finished' },
            { url: 'requireBoth', valueBoolean: true },
          ],
        },
      ],
    },
    {
      url: topicElement('canFilterBy'),
      extension: [
        { url: 'resource', valueUri: 'Encounter' },
        { url: 'filterParameter', valueString: 'patient' },
      ],
    },
    {
      url: topicElement('notificationShape'),
      extension: [
        { url: 'resource', valueUri: 'Encounter' },
        { url: 'include', valueString: 'Encounter:patient' },
      ],
    },
  ],
  modifierExtension: [
    { url: topicOnR4.artifactStatus, valueCode: 'active' },
    { url: topicElement('status'), valueCode: 'active' },
  ],
  code: { coding: [topicOnR4.code] },
};

const asBasic =
  "R4 has no SubscriptionTopic type, and /SubscriptionTopic is this service's own discovery path. A topic is served as the Backport IG's R4 " +
  'representation of one: a Basic with code fhir-types#SubscriptionTopic, meta.profile profile-SubscriptionTopic, the canonical URL in the ' +
  'artifact-url and extension-SubscriptionTopic.url extensions, the status (retired once the operator retired it) in the artifact-status and ' +
  "extension-SubscriptionTopic.status modifierExtensions, and the R5 definition's " +
  'other elements as extension-SubscriptionTopic.<element> extensions (docs/topics.md). npm run cli -- topics list lists the topics from their R5 definitions.';

/**
 * The topics a client may subscribe to, read-only, as the Backport IG has an
 * R4 server serve them: Basic resources (R4 has no SubscriptionTopic type;
 * src/topics/r4-representation.ts), at /SubscriptionTopic, the service's
 * own discovery path. The CapabilityStatement names the active ones; these
 * give their triggers, filters and shapes.
 */
export const topicRoutes: FastifyPluginAsync<TopicRoutesOptions> = async (app, { db, serviceBase }) => {
  app.get<{ Querystring: { url?: string; status?: string } }>(
    '/SubscriptionTopic',
    {
      schema: {
        summary: "The topics offered for topic-based subscriptions, each as the Backport IG's R4 Basic",
        description: `${asBasic} Each entry's fullUrl is …/SubscriptionTopic/{id}, which reads that topic.`,
        ...fhirOperation('Subscriptions', 'searchSubscriptionTopics'),
        querystring: z.object({
          url: z.string().optional().describe("The topic's canonical URL"),
          status: z.enum(['active', 'retired']).optional().describe('retired: no new subscriptions'),
        }),
        response: { 200: bundle.describe('A searchset Bundle of Basic resources, one per topic (no entry when none matches)'), ...commonRefusals },
      },
    },
    async (request, reply) => {
      const topics = (await listTopics(db)).filter(
        (topic) =>
          (request.query.url === undefined || topic.url === request.query.url) && (request.query.status === undefined || topic.status === request.query.status),
      );
      return reply.type(fhirJson).send({
        resourceType: 'Bundle',
        id: randomUUID(),
        type: 'searchset',
        total: topics.length,
        // FHIR JSON has no empty arrays: no topic, no entry.
        ...(topics.length === 0
          ? {}
          : {
              entry: topics.map((topic) => ({
                fullUrl: `${serviceBase}/SubscriptionTopic/${topic.id}`,
                resource: topicAsBasic(topic),
                search: { mode: 'match' },
              })),
            }),
      });
    },
  );

  app.get<{ Params: { id: string } }>(
    '/SubscriptionTopic/:id',
    {
      schema: {
        summary: "A topic, as the Backport IG's R4 Basic",
        description: asBasic,
        ...fhirOperation('Subscriptions', 'readSubscriptionTopic'),
        params: z.object({ id: z.string().describe("The topic's id (its entry's fullUrl in the search)") }),
        response: {
          200: resource.describe('A Basic representing the topic (profile-SubscriptionTopic)').meta({ example: basicExample }),
          ...commonRefusals,
          404: operationOutcome.describe('Not known'),
        },
      },
    },
    async (request, reply) => {
      const topic = (await listTopics(db)).find((candidate) => candidate.id === request.params.id);
      if (topic === undefined) throw notFound(`SubscriptionTopic/${request.params.id} is not known`);
      return reply.type(fhirJson).send(topicAsBasic(topic));
    },
  );
};
