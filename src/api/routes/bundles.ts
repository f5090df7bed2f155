import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Db } from '../../db/database.ts';
import { assertResourceBody, createResource } from '../../resources/store.ts';
import { asProcessableBundle, processBundle } from '../../resources/bundle.ts';
import type { SubscriptionContext } from '../../subscriptions/store.ts';
import { callerOf } from '../authentication.ts';
import { fhirJson } from '../errors.ts';
import { sendVersion } from '../fhir-reply.ts';

export type BundleRoutesOptions = { db: Db; serviceBase: string; subscriptions: SubscriptionContext };

const bundleBody = z.looseObject({ resourceType: z.literal('Bundle'), type: z.string() }).describe('A FHIR Bundle');

/**
 * POST /Bundle: a transaction or batch is processed; a Bundle of any other
 * type (document, collection, ...) is stored as a resource.
 */
export const bundleRoutes: FastifyPluginAsyncZod<BundleRoutesOptions> = async (app, { db, serviceBase, subscriptions }) => {
  app.post(
    '/Bundle',
    { schema: { summary: 'Process a transaction or batch Bundle, or store any other Bundle', body: bundleBody } },
    async (request, reply) => {
      const processable = asProcessableBundle(request.body);
      if (processable) return reply.type(fhirJson).send(await processBundle(db, processable, serviceBase, subscriptions, callerOf(request)));
      assertResourceBody('Bundle', request.body);
      return sendVersion(reply, 201, await createResource(db, 'Bundle', request.body), { serviceBase, location: true });
    },
  );
};
