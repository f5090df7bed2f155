import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { formatInstant } from '../../../fhir/instant.ts';
import { formatParameters } from '../../../fhir/parameters.ts';
import { splitQuery } from '../../../search/query.ts';
import { refusal } from '../../../fhir/outcome.ts';
import { checkedOverlapSeconds, checkedSecret, rotateSigningSecret, type RotationRequest } from '../../../subscriptions/rotation.ts';
import { callerOf } from '../../authentication.ts';
import { fhirJson } from '../../errors.ts';
import { rawQueryOf } from '../../raw-query.ts';
import { commonRefusals, fhirOperation, operationOutcome, resource } from '../../schemas.ts';
import type { SubscriptionRoutesOptions } from './routing.ts';

/** $rotate-secret: a subscription's signing secret replaced, with an overlap. */
export function rotateSecretRoutes(app: FastifyInstance, { db, context, calls }: SubscriptionRoutesOptions): void {
  // Changes state, and carries a secret: POST only, its parameters in the body (a URL's query is written to access logs).
  app.post<{ Params: { id: string } }>(
    '/Subscription/:id/$rotate-secret',
    {
      schema: {
        summary: "Rotate a subscription's signing secret, with an overlap",
        description:
          'A Parameters body: secret (valueString, the new signing secret, which becomes the secret channel header) and optionally overlapSeconds ' +
          '(valueUnsignedInt, 0 to 30 days; default SECRET_ROTATION_OVERLAP_SECONDS). Until the overlap ends every call is signed with the previous secret too: ' +
          'X-Hub-Signature with the previous one, X-Hub-Signature-Next with the new one, webhook-signature with both (docs/receivers.md). ' +
          'Recorded (who, when; never the secret). The answer never holds the secret.',
        ...fhirOperation('Subscriptions', 'rotateSubscriptionSecret', true),
        params: z.object({ id: z.string().describe("The subscription's id") }),
        body: rotateSecretParameters,
        response: {
          200: resource.describe(
            'A Parameters: subscription (valueReference), rotatedAt and previousSecretUntil (valueInstant: until then calls carry both signatures)',
          ),
          ...commonRefusals,
          400: operationOutcome.describe(
            "In the spec's refusal format: no secret, one HTTP cannot carry in a header, the current one, an overlap out of range, or parameters in the URL",
          ),
          404: operationOutcome.describe('Not known (or created by another key, to a key without admin)'),
          409: operationOutcome.describe(
            'Off, or in the overlap of its last rotation (its receiver may still hold only the oldest secret): rotate again after it ends',
          ),
        },
      },
      // rotationRequest checks the body (zod) and refuses it in the spec's format, never naming the secret: the schema above only describes it.
      validatorCompiler: () => (data: unknown) => ({ value: data }),
    },
    async (request, reply) => {
      const inUrl = splitQuery(rawQueryOf(request.url)).filter(([name]) => !formatParameters.has(name));
      if (inUrl.length > 0) {
        throw refusal(
          '$rotate-secret takes its parameters in a Parameters body only: a URL is written to access logs, so a secret sent in one is no secret any more',
        );
      }
      const rotation = await rotateSigningSecret(
        db,
        context.box,
        request.params.id,
        rotationRequest(request.body, calls.delivery.secretRotationOverlapSeconds),
        {
          caller: callerOf(request),
        },
      );
      request.log.info({ subscriptionId: rotation.subscriptionId, previousSecretUntil: rotation.previousSecretUntil }, 'subscription signing secret rotated');
      return reply.type(fhirJson).send({
        resourceType: 'Parameters',
        parameter: [
          { name: 'subscription', valueReference: { reference: `Subscription/${rotation.subscriptionId}` } },
          { name: 'rotatedAt', valueInstant: formatInstant(rotation.rotatedAt) },
          { name: 'previousSecretUntil', valueInstant: formatInstant(rotation.previousSecretUntil) },
        ],
      });
    },
  );
}

const rotateSecretParameter = z.union([
  z.object({ name: z.literal('secret'), valueString: z.string() }),
  z.object({ name: z.literal('overlapSeconds'), valueUnsignedInt: z.number() }),
  z.object({ name: z.literal('overlapSeconds'), valueInteger: z.number() }),
]);

/** What $rotate-secret takes: a Parameters with one secret, and at most one overlapSeconds. */
const rotateSecretParameters = z
  .object({ resourceType: z.literal('Parameters'), parameter: z.array(rotateSecretParameter) })
  .refine(({ parameter }) => parameter.filter((item) => item.name === 'secret').length === 1, 'give the new secret once')
  .refine(({ parameter }) => parameter.filter((item) => item.name === 'overlapSeconds').length <= 1, 'give overlapSeconds once at most')
  .describe('A Parameters: secret (valueString) and optionally overlapSeconds (valueUnsignedInt)')
  .meta({
    examples: [
      {
        resourceType: 'Parameters',
        parameter: [
          { name: 'secret', valueString: 'the-new-secret' },
          { name: 'overlapSeconds', valueUnsignedInt: 86400 },
        ],
      },
    ],
  });

/** A $rotate-secret body as a rotation: refused in the spec's format, never with the secret's value. */
function rotationRequest(body: unknown, defaultOverlapSeconds: number): RotationRequest {
  if (body === undefined || body === null) throw refusal('$rotate-secret takes a Parameters body with the new secret (valueString): none was sent');
  const parsed = rotateSecretParameters.safeParse(body);
  if (!parsed.success) {
    throw refusal(
      `$rotate-secret takes a Parameters with secret (valueString) and optionally overlapSeconds (valueUnsignedInt): ${parsed.error.issues[0]!.message}`,
    );
  }
  let secret = '';
  let overlapSeconds = defaultOverlapSeconds;
  for (const parameter of parsed.data.parameter) {
    if (parameter.name === 'secret') secret = parameter.valueString;
    else overlapSeconds = 'valueUnsignedInt' in parameter ? parameter.valueUnsignedInt : parameter.valueInteger;
  }
  return { secret: checkedSecret(secret), overlapSeconds: checkedOverlapSeconds(overlapSeconds) };
}
