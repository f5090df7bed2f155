import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Db } from '../../db/database.ts';
import type { FhirResource } from '../../db/schema.ts';
import { assertResourceBody, createResource } from '../../resources/store.ts';
import { asProcessableBundle, processBundle, type ProcessableBundle } from '../../resources/bundle.ts';
import { badRequest } from '../../fhir/outcome.ts';
import type { SubscriptionContext } from '../../subscriptions/store.ts';
import { callerOf } from '../authentication.ts';
import { fhirJson } from '../errors.ts';
import { bundle, commonRefusals, fhirOperation, operationOutcome, resource } from '../schemas.ts';
import { sendVersion } from '../fhir-reply.ts';

export type BundleRoutesOptions = { db: Db; serviceBase: string; subscriptions: SubscriptionContext };

const bundleBody = z
  .looseObject({ resourceType: z.literal('Bundle'), type: z.string() })
  .describe('A FHIR Bundle')
  .meta({
    example: {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        {
          fullUrl: 'urn:uuid:7f1c9a2e-0d4b-4c8e-9b6a-3e2f1d0c9b8a',
          resource: { resourceType: 'Patient', active: true },
          request: { method: 'POST', url: 'Patient' },
        },
        {
          resource: {
            resourceType: 'Appointment',
            status: 'booked',
            participant: [{ actor: { reference: 'urn:uuid:7f1c9a2e-0d4b-4c8e-9b6a-3e2f1d0c9b8a' }, status: 'accepted' }],
          },
          request: { method: 'POST', url: 'Appointment' },
        },
      ],
    },
  });

/**
 * The subscriptions a processed Bundle created or switched off, once it is
 * committed: a line each, as POST /Subscription logs them. Its entries were
 * checked while it was processed; a response entry answers the request entry
 * at its position.
 */
function logSubscriptionChanges(log: FastifyBaseLogger, request: { entry: unknown[] }, response: FhirResource): void {
  const answers = (response.entry ?? []) as { resource?: { resourceType?: string; id?: string }; response?: { status?: string } }[];
  for (const [index, answer] of answers.entries()) {
    const method = (request.entry[index] as { request?: { method?: string } } | undefined)?.request?.method;
    if (answer.resource?.resourceType !== 'Subscription' || method !== 'POST') continue;
    log.info(
      { subscriptionId: answer.resource.id },
      answer.response?.status?.startsWith('201') ? 'subscription created (requested)' : 'subscription switched off',
    );
  }
}

/**
 * POST [base], FHIR's endpoint for transactions and batches (where FHIR
 * clients send them), and POST /Bundle, the specification's: a transaction
 * or batch is processed the same at both; at /Bundle a Bundle of any other
 * type (document, collection, ...) is stored as a resource.
 */
export const bundleRoutes: FastifyPluginAsyncZod<BundleRoutesOptions> = async (app, { db, serviceBase, subscriptions }) => {
  const bundleResponses = {
    200: bundle.describe('transaction-response or batch-response: one entry per request entry, in order'),
    ...commonRefusals,
    409: operationOutcome.describe('A transaction entry conflicted; nothing was written'),
    412: operationOutcome.describe("A transaction entry's If-Match or condition failed; nothing was written"),
    413: operationOutcome.describe('More than 1,000 entries, or a body over 10 MiB'),
  };
  const processed = async (request: FastifyRequest, reply: FastifyReply, processable: ProcessableBundle) => {
    const response = await processBundle(db, processable, serviceBase, subscriptions, callerOf(request));
    logSubscriptionChanges(request.log, processable, response);
    return reply.type(fhirJson).send(response);
  };

  app.post(
    '/',
    {
      schema: {
        summary: 'Process a transaction or batch Bundle (FHIR: POST [base])',
        description: 'A transaction runs its entries in one database transaction (all or nothing); a batch runs each on its own. At most 1,000 entries.',
        ...fhirOperation('Bundles', 'transactionOrBatch', true),
        body: bundleBody,
        response: bundleResponses,
      },
    },
    async (request, reply) => {
      const processable = asProcessableBundle(request.body);
      if (processable === undefined) {
        throw badRequest(
          `POST [base] takes a transaction or batch Bundle, not a ${JSON.stringify(request.body.type)} one: store other Bundles with POST /Bundle`,
        );
      }
      return processed(request, reply, processable);
    },
  );

  app.post(
    '/Bundle',
    {
      schema: {
        summary: 'Process a transaction or batch Bundle, or store any other Bundle',
        description: 'A transaction or batch is processed as at POST [base]; a Bundle of another type is stored as a Bundle resource.',
        ...fhirOperation('Bundles', 'processBundle', true),
        body: bundleBody,
        response: { ...bundleResponses, 201: resource.describe('A Bundle of another type (document, collection, …), stored as a resource') },
      },
    },
    async (request, reply) => {
      const processable = asProcessableBundle(request.body);
      if (processable) return processed(request, reply, processable);
      assertResourceBody('Bundle', request.body);
      return sendVersion(reply, 201, await createResource(db, 'Bundle', request.body), { serviceBase, location: true });
    },
  );
};
