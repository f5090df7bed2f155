import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { formatParameters } from '../../../fhir/parameters.ts';
import { issueBindingToken, maxSubscriptionsPerToken } from '../../../channels/websocket/binding-tokens.ts';
import { refusal } from '../../../fhir/outcome.ts';
import { callerOf } from '../../authentication.ts';
import { fhirJson } from '../../errors.ts';
import { commonRefusals, fhirOperation, operationOutcome, resource } from '../../schemas.ts';
import { byGetAndPost, operationInput, type SubscriptionRoutesOptions } from './routing.ts';

/** $get-ws-binding-token (Backport IG) for the websocket subscriptions a key sees, and for one. */
export function getWsBindingTokenRoutes(app: FastifyInstance, { db, context, bindingTokenSeconds }: SubscriptionRoutesOptions): void {
  /** $get-ws-binding-token's answer for the subscriptions `ids` names (none: every websocket subscription the key sees). */
  const bindingToken = async (request: FastifyRequest, ids: string[]) => {
    const token = await issueBindingToken(db, { baseUrl: context.baseUrl, caller: callerOf(request), ids, lifetimeSeconds: bindingTokenSeconds });
    // The token itself is never logged: it is a credential until used.
    request.log.info({ subscriptions: ids.length === 0 ? 'every websocket subscription of the key' : ids }, 'websocket binding token issued');
    return token;
  };
  const tokenAnswer = resource.describe(
    'A Parameters: token (valueString, shown once), expiration (valueDateTime), subscription (valueString, one per subscription it binds), websocket-url (valueUrl)',
  );

  byGetAndPost(app, {
    url: '/Subscription/$get-ws-binding-token',
    schema: {
      summary: 'A token for a websocket client to bind to websocket subscriptions (Backport IG $get-ws-binding-token, type level)',
      description: `A token for the subscriptions named by id (repeated or comma-separated; without id, every websocket subscription the key sees that is not off, at most ${maxSubscriptionsPerToken}). It binds once (the websocket message bind-with-token <token>), within WEBSOCKET_BINDING_TOKEN_SECONDS, for this key only. By GET, or by POST with a Parameters body.`,
      ...fhirOperation('Subscriptions', 'getWsBindingToken'),
      querystring: z.looseObject({ id: z.string().optional().describe('Subscription ids, comma-separated or repeated') }),
      response: { 200: tokenAnswer, ...commonRefusals, 404: operationOutcome.describe('A subscription named is not known (or created by another key)') },
    },
    handler: async (request, reply) => {
      const ids: string[] = [];
      for (const [name, value] of operationInput(request)) {
        if (formatParameters.has(name)) continue;
        if (name !== 'id') throw refusal(`Unknown parameter '${name}' for $get-ws-binding-token (supported: id)`);
        ids.push(...value.split(',').filter((id) => id !== ''));
      }
      return reply.type(fhirJson).send(await bindingToken(request, ids));
    },
  });

  byGetAndPost(app, {
    url: '/Subscription/:id/$get-ws-binding-token',
    schema: {
      summary: 'A token for a websocket client to bind to this websocket subscription (Backport IG $get-ws-binding-token)',
      description:
        'A token that binds this subscription once (the websocket message bind-with-token <token>), within WEBSOCKET_BINDING_TOKEN_SECONDS, for this key only. An id parameter is ignored, as the IG says. By GET, or by POST.',
      ...fhirOperation('Subscriptions', 'getWsBindingTokenOfSubscription'),
      params: z.object({ id: z.string().describe("The subscription's id") }),
      response: { 200: tokenAnswer, ...commonRefusals, 404: operationOutcome.describe('Not known (or created by another key)') },
    },
    handler: async (request, reply) => {
      const { id } = request.params as { id: string };
      const unknown = operationInput(request).find(([name]) => !formatParameters.has(name) && name !== 'id');
      if (unknown !== undefined) throw refusal(`Unknown parameter '${unknown[0]}' for $get-ws-binding-token (supported: id, ignored at the instance level)`);
      return reply.type(fhirJson).send(await bindingToken(request, [id]));
    },
  });
}
