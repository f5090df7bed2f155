import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { formatParameters } from '../../../fhir/parameters.ts';
import { refusal } from '../../../fhir/outcome.ts';
import { subscriptionStatus } from '../../../subscriptions/topic-status.ts';
import { callerOf } from '../../authentication.ts';
import { fhirJson } from '../../errors.ts';
import { bundle, commonRefusals, fhirOperation, operationOutcome } from '../../schemas.ts';
import { byGetAndPost, operationInput, type SubscriptionRoutesOptions } from './routing.ts';

/** $status (Backport IG) of the topic-based subscriptions a key sees, and of one. */
export function statusRoutes(app: FastifyInstance, { db, context }: SubscriptionRoutesOptions): void {
  byGetAndPost(app, {
    url: '/Subscription/$status',
    schema: {
      summary: 'The status of topic-based subscriptions (Backport IG $status, type level)',
      description:
        'A searchset Bundle of status Parameters (type query-status), one per topic-based subscription the key may see, narrowed by id and status. By GET, or by POST with a Parameters body.',
      ...fhirOperation('Subscriptions', 'subscriptionsStatus'),
      querystring: z.looseObject({
        id: z.string().optional().describe('Subscription ids, comma-separated or repeated'),
        status: z.string().optional().describe('requested, active, error or off, comma-separated'),
      }),
      response: { 200: bundle.describe('A searchset Bundle of backport-subscription-status-r4 Parameters'), ...commonRefusals },
    },
    handler: async (request, reply) => reply.type(fhirJson).send(await subscriptionStatus(db, context, callerOf(request), { input: operationInput(request) })),
  });

  byGetAndPost(app, {
    url: '/Subscription/:id/$status',
    schema: {
      summary: "A topic-based subscription's status (Backport IG $status)",
      description: 'Its state, its error and events-since-subscription-start: the number of its latest event. By GET, or by POST (no parameters).',
      ...fhirOperation('Subscriptions', 'subscriptionStatus'),
      params: z.object({ id: z.string().describe("The subscription's id") }),
      response: {
        200: bundle.describe('A searchset Bundle of one backport-subscription-status-r4 Parameters'),
        ...commonRefusals,
        404: operationOutcome.describe('Not known (or created by another key)'),
      },
    },
    handler: async (request, reply) => {
      const { id } = request.params as { id: string };
      const input = operationInput(request);
      const given = input.filter(([name]) => !formatParameters.has(name));
      if (given.length > 0) throw refusal(`$status of one subscription takes no parameters (given: ${given.map(([name]) => name).join(', ')})`);
      return reply.type(fhirJson).send(await subscriptionStatus(db, context, callerOf(request), { id }));
    },
  });
}
