import { randomUUID } from 'node:crypto';
import type { FastifyError, FastifyPluginAsync } from 'fastify';
import type { Db } from '../../db/database.ts';
import { FhirError } from '../../fhir/outcome.ts';
import {
  readSubscription,
  searchSubscriptions,
  submitSubscription,
  subscriptionsAreImmutable,
  type SubscriptionContext,
} from '../../subscriptions/store.ts';
import { asRefusal } from '../../subscriptions/requests.ts';
import { callerOf } from '../authentication.ts';
import { errorOutcome, fhirJson, sendOutcome } from '../errors.ts';

export type SubscriptionRoutesOptions = { db: Db; serviceBase: string; context: SubscriptionContext };

/** The Subscription endpoints of the spec: create or switch off, search, read; no update. */
export const subscriptionRoutes: FastifyPluginAsync<SubscriptionRoutesOptions> = async (app, { db, serviceBase, context }) => {
  // The spec gives these endpoints their own refusal format: every 400 (malformed JSON included) uses it.
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const { status, outcome } = errorOutcome(error, request);
    return sendOutcome(reply, status, status === 400 ? asRefusal(outcome) : outcome);
  });

  app.post('/Subscription', { schema: { summary: 'Create a subscription (status requested) or switch one off (status off)' } }, async (request, reply) => {
    const { created, resource } = await submitSubscription(db, context, request.body, callerOf(request));
    request.log.info({ subscriptionId: resource.id }, created ? 'subscription created (requested)' : 'subscription switched off');
    return reply.code(created ? 201 : 200).type(fhirJson).header('location', `${serviceBase}/Subscription/${resource.id}`).send(resource);
  });

  app.get('/Subscription', { schema: { summary: 'Search subscriptions' } }, async (request, reply) => {
    const rawQuery = request.url.includes('?') ? request.url.slice(request.url.indexOf('?') + 1) : '';
    const page = await searchSubscriptions(db, context, rawQuery, callerOf(request));
    const pairs = rawQuery.split('&').filter((pair) => pair !== '' && !pair.startsWith('_page_token='));
    const searchUrl = `${serviceBase}/Subscription`;
    return reply.type(fhirJson).send({
      resourceType: 'Bundle',
      id: randomUUID(),
      type: 'searchset',
      link: page.nextPageToken === undefined ? [] : [{ relation: 'next', url: `${searchUrl}?${[...pairs, `_page_token=${page.nextPageToken}`].join('&')}` }],
      entry: page.resources.map((resource) => ({ fullUrl: `${searchUrl}/${resource.id}`, resource, search: { mode: 'match' } })),
    });
  });

  app.get<{ Params: { id: string } }>('/Subscription/:id', { schema: { summary: 'Read a subscription' } }, async (request, reply) => {
    const resource = await readSubscription(db, context, request.params.id, callerOf(request));
    // The spec's read envelope: neither a Bundle nor a bare resource.
    return reply.type(fhirJson).send({ fullUrl: `${serviceBase}/Subscription/${resource.id}`, resource, search: { mode: 'match' } });
  });

  app.route({
    method: ['PUT', 'PATCH', 'DELETE'],
    url: '/Subscription/:id',
    schema: { summary: 'Not allowed: subscriptions cannot be updated or deleted' },
    handler: async () => {
      throw new FhirError(405, 'not-supported', subscriptionsAreImmutable);
    },
  });
};
