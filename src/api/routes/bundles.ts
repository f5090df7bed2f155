import type { FastifyBaseLogger } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Db } from '../../db/database.ts';
import type { FhirResource } from '../../db/schema.ts';
import { assertResourceBody, createResource } from '../../resources/store.ts';
import { asProcessableBundle, processBundle } from '../../resources/bundle.ts';
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
        { fullUrl: 'urn:uuid:7f1c9a2e-0d4b-4c8e-9b6a-3e2f1d0c9b8a', resource: { resourceType: 'Patient', active: true }, request: { method: 'POST', url: 'Patient' } },
        {
          resource: { resourceType: 'Appointment', status: 'booked', participant: [{ actor: { reference: 'urn:uuid:7f1c9a2e-0d4b-4c8e-9b6a-3e2f1d0c9b8a' }, status: 'accepted' }] },
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
    log.info({ subscriptionId: answer.resource.id }, answer.response?.status?.startsWith('201') ? 'subscription created (requested)' : 'subscription switched off');
  }
}

/**
 * POST /Bundle: a transaction or batch is processed; a Bundle of any other
 * type (document, collection, ...) is stored as a resource.
 */
export const bundleRoutes: FastifyPluginAsyncZod<BundleRoutesOptions> = async (app, { db, serviceBase, subscriptions }) => {
  app.post(
    '/Bundle',
    {
      schema: {
        summary: 'Process a transaction or batch Bundle, or store any other Bundle',
        description: 'A transaction runs its entries in one database transaction (all or nothing); a batch runs each on its own. At most 1,000 entries.',
        ...fhirOperation('Bundles', 'processBundle', true),
        body: bundleBody,
        response: {
          200: bundle.describe('transaction-response or batch-response: one entry per request entry, in order'),
          201: resource.describe('A Bundle of another type (document, collection, …), stored as a resource'),
          ...commonRefusals,
          409: operationOutcome.describe('A transaction entry conflicted; nothing was written'),
          412: operationOutcome.describe("A transaction entry's If-Match failed; nothing was written"),
          413: operationOutcome.describe('More than 1,000 entries, or a body over 10 MiB'),
        },
      },
    },
    async (request, reply) => {
      const processable = asProcessableBundle(request.body);
      if (processable) {
        const response = await processBundle(db, processable, serviceBase, subscriptions, callerOf(request));
        logSubscriptionChanges(request.log, processable, response);
        return reply.type(fhirJson).send(response);
      }
      assertResourceBody('Bundle', request.body);
      return sendVersion(reply, 201, await createResource(db, 'Bundle', request.body), { serviceBase, location: true });
    },
  );
};
