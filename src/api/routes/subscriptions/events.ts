import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { maxEventsPerAnswer, subscriptionEvents } from '../../../subscriptions/topic-status.ts';
import { callerOf } from '../../authentication.ts';
import { fhirJson } from '../../errors.ts';
import { bundle, commonRefusals, fhirOperation, operationOutcome } from '../../schemas.ts';
import { byGetAndPost, operationInput, type SubscriptionRoutesOptions } from './routing.ts';

/** $events (Backport IG): a topic-based subscription's events still held. */
export function eventsRoutes(app: FastifyInstance, { db, context }: SubscriptionRoutesOptions): void {
  byGetAndPost(app, {
    url: '/Subscription/:id/$events',
    schema: {
      summary: "A topic-based subscription's events still held, by number (Backport IG $events)",
      description: `How a client that saw a gap in the event numbers gets what it missed: a history Bundle, the status (type query-event) first, then the events, at most ${maxEventsPerAnswer} per answer. Numbers no longer held are said in an OperationOutcome entry. By GET, or by POST with a Parameters body.`,
      ...fhirOperation('Subscriptions', 'subscriptionEvents'),
      params: z.object({ id: z.string().describe("The subscription's id") }),
      querystring: z.looseObject({
        eventsSinceNumber: z.string().optional().describe('The first event number (default: the oldest held)'),
        eventsUntilNumber: z.string().optional().describe('The last event number (default: the latest)'),
        content: z.enum(['empty', 'id-only', 'full-resource']).optional().describe("How much of each event (default: the subscription's payload content)"),
      }),
      response: {
        200: bundle.describe('A history Bundle: backport-subscription-status-r4 Parameters, then the events'),
        ...commonRefusals,
        404: operationOutcome.describe('Not known (or created by another key)'),
      },
    },
    handler: async (request, reply) => {
      const { id } = request.params as { id: string };
      return reply.type(fhirJson).send(await subscriptionEvents(db, context, callerOf(request), id, operationInput(request)));
    },
  });
}
