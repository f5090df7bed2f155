import type { FastifyInstance, FastifyRequest, FastifySchema, RouteHandlerMethod } from 'fastify';
import type { Db } from '../../../db/database.ts';
import { parametersAsInput, type OperationInput } from '../../../fhir/parameters.ts';
import { splitQuery } from '../../../search/query.ts';
import type { SubscriptionContext } from '../../../subscriptions/store.ts';
import type { CallContext } from '../../../dispatch/subscriber.ts';
import { rawQueryOf } from '../../raw-query.ts';
import { fhirOperation, resource } from '../../schemas.ts';

/** What the Subscription routes share: their options, an operation's input, an operation served by GET and by POST. */
export type SubscriptionRoutesOptions = {
  db: Db;
  serviceBase: string;
  context: SubscriptionContext;
  /** How $reactivate calls the subscriber (src/dispatch/reactivation-on-request.ts). */
  calls: CallContext;
  /** How long a $get-ws-binding-token token may be used (WEBSOCKET_BINDING_TOKEN_SECONDS). */
  bindingTokenSeconds: number;
};

/** An operation's input: the URL's parameters, and those of a Parameters body when it was invoked by POST. */
export const operationInput = (request: FastifyRequest): OperationInput => [...splitQuery(rawQueryOf(request.url)), ...parametersAsInput(request.body)];

const parametersBody = resource
  .nullish()
  .describe('A Parameters resource with the same parameters as the GET form (valueString, valueCode, valueInteger, …); none at all is fine');

/** An operation is served by GET and by POST (FHIR: every operation may be invoked by POST); only the POST has a body. */
export function byGetAndPost(app: FastifyInstance, route: { url: string; schema: FastifySchema & { operationId: string }; handler: RouteHandlerMethod }): void {
  app.route({ ...route, method: 'GET' });
  app.route({
    ...route,
    method: 'POST',
    schema: { ...route.schema, ...fhirOperation('Subscriptions', `${route.schema.operationId}ByPost`, true), body: parametersBody },
  });
}
