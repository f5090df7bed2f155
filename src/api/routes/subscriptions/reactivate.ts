import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { reactivateOnRequest } from '../../../dispatch/reactivation-on-request.ts';
import { refusal } from '../../../fhir/outcome.ts';
import { readSubscription } from '../../../subscriptions/store.ts';
import { callerOf } from '../../authentication.ts';
import { fhirJson } from '../../errors.ts';
import { commonRefusals, fhirOperation, operationOutcome, subscription } from '../../schemas.ts';
import type { SubscriptionRoutesOptions } from './routing.ts';

/** $reactivate: a subscription in error reactivated now, its receiver fixed. */
export function reactivateRoutes(app: FastifyInstance, { db, context, calls }: SubscriptionRoutesOptions): void {
  // An operation that changes state: POST only (FHIR: an operation with affectsState is not invoked by GET).
  app.post<{ Params: { id: string } }>(
    '/Subscription/:id/$reactivate',
    {
      schema: {
        summary: 'Reactivate a subscription in error now, its receiver fixed',
        description:
          "Sends the reactivation handshake now, rather than at the next matching event (the spec's path, which stays), and waits for it (up to DELIVERY_RESPONSE_TIMEOUT_MS). On 2xx the subscription is active, as an event's reactivation makes it; the events it missed in error are not sent ($events, $resend). No parameters: no body, or a Parameters without any.",
        ...fhirOperation('Subscriptions', 'reactivateSubscription', true),
        params: z.object({ id: z.string().describe("The subscription's id") }),
        body: reactivateParameters,
        response: {
          200: subscription.describe('Reactivated: the Subscription, status active'),
          ...commonRefusals,
          400: operationOutcome.describe("Parameters given, in the spec's refusal format: the operation takes none"),
          404: operationOutcome.describe('Not known (or created by another key, to a key without admin)'),
          409: operationOutcome.describe('Not in error (active, requested or off), or superseded by a newer subscription for its criteria: nothing was called'),
          502: operationOutcome.describe('The handshake failed: the subscription stays in error, with the new reason, which this says'),
        },
      },
      // The body is checked below, with the spec's refusal text: the schema above only describes it.
      validatorCompiler: () => (data: unknown) => ({ value: data }),
    },
    async (request, reply) => {
      if (!reactivateParameters.safeParse(request.body).success) {
        throw refusal('$reactivate takes no parameters: send no body, or a Parameters without any parameter');
      }
      const caller = callerOf(request);
      await reactivateOnRequest(calls, request.params.id, { caller });
      return reply.type(fhirJson).send(await readSubscription(db, context, request.params.id, caller));
    },
  );
}

/** What $reactivate takes: nothing (no body), or a Parameters without parameters. */
const reactivateParameters = z
  .object({ resourceType: z.literal('Parameters'), parameter: z.array(z.unknown()).max(0).optional() })
  .nullish()
  .describe('Nothing, or a Parameters without any parameter');
