import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { nothingToResend, resendEvents, type ResendOutcome, type ResendSelection } from '../../../subscriptions/resend.ts';
import { refusal } from '../../../fhir/outcome.ts';
import { callerOf } from '../../authentication.ts';
import { fhirJson } from '../../errors.ts';
import { commonRefusals, fhirOperation, operationOutcome, resource } from '../../schemas.ts';
import type { SubscriptionRoutesOptions } from './routing.ts';

/** $resend: recorded events of a subscription sent again. */
export function resendRoutes(app: FastifyInstance, { db }: SubscriptionRoutesOptions): void {
  app.post<{ Params: { id: string } }>(
    '/Subscription/:id/$resend',
    {
      schema: {
        summary: 'Send recorded events of a subscription again',
        description:
          'A Parameters body with one of: eventNumber (an event by its number), attempt (the event of a recorded call, by its id), failedSince (every event that failed for good since that instant). A resend is a new attempt of the same event: same number, version and webhook-id. Only to an active subscription. Answers the events queued, and those skipped with why; when failedSince matches nothing, an outcome part that says so.',
        ...fhirOperation('Subscriptions', 'resendEvents', true),
        params: z.object({ id: z.string().describe("The subscription's id") }),
        body: resendParameters,
        response: {
          200: resource.describe(
            'A Parameters: a queued part per event queued (eventNumber, resource), a skipped part per event left (with its reason); ' +
              'when no event failed for good since failedSince, only an outcome part (valueString "Nothing to resend: …"): FHIR has no empty parameter array',
          ),
          ...commonRefusals,
          400: operationOutcome.describe('Not active, or the event cannot be sent again (pending, gone, a newer version sent since)'),
          404: operationOutcome.describe('The subscription (or the event, or the call) is not known or no longer held'),
        },
      },
      // resendSelection checks the body (zod) and refuses it in the spec's format: the schema above only describes it.
      validatorCompiler: () => (data: unknown) => ({ value: data }),
    },
    async (request, reply) => {
      const outcome = await resendEvents(db, request.params.id, resendSelection(request.body), callerOf(request));
      request.log.info({ subscriptionId: request.params.id, queued: outcome.queued.length, skipped: outcome.skipped.length }, 'events resent on request');
      return reply.type(fhirJson).send(resendAnswer(outcome));
    },
  );
}

const resendParameter = z.union([
  z.object({ name: z.literal('eventNumber'), valueString: z.string().regex(/^[1-9]\d{0,14}$/, 'eventNumber must be an event number') }),
  z.object({ name: z.literal('eventNumber'), valuePositiveInt: z.number().int().positive() }),
  z.object({
    name: z.literal('attempt'),
    valueString: z.string().regex(/^\d{1,18}$/, 'attempt must be the id of a recorded call (webhook.delivery_attempts.id)'),
  }),
  z.object({ name: z.literal('failedSince'), valueInstant: z.iso.datetime({ offset: true }) }),
  z.object({ name: z.literal('failedSince'), valueDateTime: z.iso.datetime({ offset: true }) }),
]);

/** What $resend takes: a Parameters with exactly one of eventNumber, attempt, failedSince. */
const resendParameters = z
  .object({ resourceType: z.literal('Parameters'), parameter: z.array(resendParameter).length(1, 'give exactly one of eventNumber, attempt, failedSince') })
  .describe('A Parameters: eventNumber (valueString or valuePositiveInt), attempt (valueString) or failedSince (valueInstant)')
  .meta({ examples: [{ resourceType: 'Parameters', parameter: [{ name: 'eventNumber', valueString: '7' }] }] });

function resendSelection(body: unknown): ResendSelection {
  const parsed = resendParameters.safeParse(body);
  if (!parsed.success) {
    throw refusal(
      `$resend takes a Parameters with exactly one of eventNumber, attempt, failedSince (an instant with its offset): ${parsed.error.issues[0]!.message}`,
    );
  }
  const parameter = parsed.data.parameter[0]!;
  if (parameter.name === 'eventNumber') return { eventNumber: 'valueString' in parameter ? Number(parameter.valueString) : parameter.valuePositiveInt };
  if (parameter.name === 'attempt') return { attemptId: parameter.valueString };
  return { failedSince: new Date('valueInstant' in parameter ? parameter.valueInstant : parameter.valueDateTime) };
}

function resendAnswer({ queued, skipped }: ResendOutcome): Record<string, unknown> {
  const parts = (event: ResendOutcome['queued'][number]) => [
    ...(event.eventNumber === null ? [] : [{ name: 'eventNumber', valueString: String(event.eventNumber) }]),
    { name: 'resource', valueReference: { reference: event.resource } },
  ];
  const parameter: Record<string, unknown>[] = [
    ...queued.map((event) => ({ name: 'queued', part: parts(event) })),
    ...skipped.map((event) => ({ name: 'skipped', part: [...parts(event), { name: 'reason', valueString: event.reason }] })),
  ];
  // FHIR JSON has no empty arrays: when nothing matched (only failedSince can match nothing), the answer says so.
  if (parameter.length === 0) parameter.push({ name: 'outcome', valueString: nothingToResend });
  return { resourceType: 'Parameters', parameter };
}
