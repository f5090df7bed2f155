import type { FastifyError, FastifyPluginAsync } from 'fastify';
import { asRefusal } from '../../../subscriptions/requests.ts';
import { errorOutcome, sendOutcome } from '../../errors.ts';
import { eventsRoutes } from './events.ts';
import { getWsBindingTokenRoutes } from './get-ws-binding-token.ts';
import { subscriptionInteractionRoutes } from './interactions.ts';
import { reactivateRoutes } from './reactivate.ts';
import { resendRoutes } from './resend.ts';
import { rotateSecretRoutes } from './rotate-secret.ts';
import type { SubscriptionRoutesOptions } from './routing.ts';
import { statusRoutes } from './status.ts';

/**
 * The Subscription endpoints: the spec's interactions (interactions.ts) and
 * the operations, one file each, named as their URLs. Registered in this order,
 * which is the order /docs lists them in.
 */
export const subscriptionRoutes: FastifyPluginAsync<SubscriptionRoutesOptions> = async (app, options) => {
  // The spec gives these endpoints their own refusal format: every 400 (malformed JSON included) uses it.
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const { status, outcome } = errorOutcome(error, request);
    return sendOutcome(reply, status, status === 400 ? asRefusal(outcome) : outcome);
  });
  subscriptionInteractionRoutes(app, options);
  statusRoutes(app, options);
  eventsRoutes(app, options);
  resendRoutes(app, options);
  getWsBindingTokenRoutes(app, options);
  reactivateRoutes(app, options);
  rotateSecretRoutes(app, options);
};
