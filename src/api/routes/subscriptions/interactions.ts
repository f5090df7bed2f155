import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { FhirError } from '../../../fhir/outcome.ts';
import { readSubscription, searchSubscriptions, submitSubscription, subscriptionsAreImmutable } from '../../../subscriptions/store.ts';
import { callerOf } from '../../authentication.ts';
import { fhirJson } from '../../errors.ts';
import { linkWithPageToken, pairsWithoutPageToken, rawQueryOf } from '../../raw-query.ts';
import { bundle, commonRefusals, fhirOperation, operationOutcome, subscription, subscriptionReadEnvelope } from '../../schemas.ts';
import type { SubscriptionRoutesOptions } from './routing.ts';

/** The Subscription endpoints of the spec: create or switch off, search, read; no update. */
export function subscriptionInteractionRoutes(app: FastifyInstance, { db, serviceBase, context }: SubscriptionRoutesOptions): void {
  app.post(
    '/Subscription',
    {
      schema: {
        summary: 'Create a subscription (status requested) or switch one off (status off)',
        description:
          "A new subscription is requested: the service calls its endpoint (the handshake) and makes it active on a 2xx. A topic-based subscription with channel.type websocket has no endpoint: it is active at once, and its clients bind with $get-ws-binding-token. Status off switches off every subscription with the criteria. Refusals use the spec's format.",
        ...fhirOperation('Subscriptions', 'submitSubscription', true),
        body: subscription,
        response: {
          201: subscription.describe('Created, status requested (active for a websocket subscription); the reason echoed, a generated secret never shown'),
          200: subscription.describe('Switched off'),
          ...commonRefusals,
          400: operationOutcome.describe("Refused, in the spec's format: the reason names the field"),
        },
      },
      // parseSubscriptionRequest checks the body (zod), with the spec's refusal texts: the schema above only describes it.
      validatorCompiler: () => (data: unknown) => ({ value: data }),
    },
    async (request, reply) => {
      const { created, resource } = await submitSubscription(db, context, request.body, callerOf(request));
      request.log.info({ subscriptionId: resource.id }, created ? `subscription created (${String(resource.status)})` : 'subscription switched off');
      return reply
        .code(created ? 201 : 200)
        .type(fhirJson)
        .header('location', `${serviceBase}/Subscription/${resource.id}`)
        .send(resource);
    },
  );

  app.get(
    '/Subscription',
    {
      schema: {
        summary: 'Search subscriptions (a key without the admin scope sees its own)',
        ...fhirOperation('Subscriptions', 'searchSubscriptions'),
        querystring: z.looseObject({
          criteria: z.string().optional().describe('The exact criteria string'),
          url: z.string().optional().describe('The exact endpoint'),
          status: z.string().optional().describe('requested, active, error or off, comma-separated'),
          'custom-channel': z
            .string()
            .optional()
            .describe(
              "The Backport IG's custom channel type, [system|]code, comma-separated: nats-jetstream, rabbitmq (the subscriptions whose channel is one)",
            ),
          _tag: z.string().optional().describe('<system>|<identifier>: the subscription with this identifier'),
          _count: z.string().optional().describe('Page size, 1-1000 (default 20)'),
          _page_token: z.string().optional().describe("The next link's token"),
        }),
        response: { 200: bundle.describe('A searchset Bundle of Subscriptions'), ...commonRefusals },
      },
    },
    async (request, reply) => {
      const rawQuery = rawQueryOf(request.url);
      const page = await searchSubscriptions(db, context, rawQuery, callerOf(request));
      const searchUrl = `${serviceBase}/Subscription`;
      return reply.type(fhirJson).send({
        resourceType: 'Bundle',
        id: randomUUID(),
        type: 'searchset',
        // The spec's shape, kept where FHIR JSON would leave them out: link present even empty, entry the array of matches even when none.
        link:
          page.nextPageToken === undefined
            ? []
            : [{ relation: 'next', url: linkWithPageToken(searchUrl, pairsWithoutPageToken(rawQuery), page.nextPageToken) }],
        entry: page.resources.map((resource) => ({ fullUrl: `${searchUrl}/${resource.id}`, resource, search: { mode: 'match' } })),
      });
    },
  );

  app.get<{ Params: { id: string } }>(
    '/Subscription/:id',
    {
      schema: {
        summary: 'Read a subscription',
        ...fhirOperation('Subscriptions', 'readSubscription'),
        params: z.object({ id: z.string().describe("The subscription's id") }),
        response: {
          200: subscriptionReadEnvelope,
          ...commonRefusals,
          404: operationOutcome.describe('Not known (or created by another key, to a key without admin)'),
        },
      },
    },
    async (request, reply) => {
      const resource = await readSubscription(db, context, request.params.id, callerOf(request));
      // The spec's read envelope: neither a Bundle nor a bare resource.
      return reply.type(fhirJson).send({ fullUrl: `${serviceBase}/Subscription/${resource.id}`, resource, search: { mode: 'match' } });
    },
  );

  for (const method of ['PUT', 'PATCH', 'DELETE'] as const) {
    app.route({
      method,
      url: '/Subscription/:id',
      schema: {
        summary: 'Not allowed: subscriptions cannot be updated or deleted',
        ...fhirOperation('Subscriptions', `${method.toLowerCase()}SubscriptionRefused`),
        response: { 405: operationOutcome.describe('Switch it off and create another (POST /Subscription)'), ...commonRefusals },
      },
      handler: async () => {
        throw new FhirError(405, 'not-supported', subscriptionsAreImmutable);
      },
    });
  }
}
