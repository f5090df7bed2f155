import type { Dispatcher } from 'undici';
import type { Config } from '../../config/index.ts';
import type { Metrics } from '../../metrics/metrics.ts';
import type { ChannelContext } from '../channel.ts';
import { createTokenProvider, type TokenProvider } from './oauth.ts';
import { OriginCalls } from './origin-calls.ts';
import { createDeliveryAgent } from './ssrf.ts';

/** What a process calls subscribers' endpoints with: the SSRF-guarded agent, places per origin and the OAuth client. */
export type RestHookCalls = {
  /** The SSRF-guarded HTTP/1.1 agent. */
  dispatcher: Dispatcher;
  /** The places for calls at each origin, given fairly among its subscriptions (DELIVERY_MAX_CONNECTIONS_PER_ORIGIN). */
  originCalls: OriginCalls;
  tokens: TokenProvider | undefined;
};

/** What rest-hook sends with: the common context, its calls' parts, and the registry that counts a failed token request. */
export type RestHookContext = ChannelContext & RestHookCalls & { metrics: Pick<Metrics, 'tokenRequestFailed'> };

/**
 * The parts a process calls subscribers' endpoints with, made from the
 * delivery settings and the OAuth client's (when configured). close() ends
 * the agent's connections.
 */
export function createRestHookCalls(delivery: Config['delivery'], oauth: Config['oauth']): { calls: RestHookCalls; close: () => Promise<void> } {
  const dispatcher = createDeliveryAgent({
    allowPrivateNetworks: delivery.allowPrivateNetworks,
    connectTimeoutMs: delivery.connectTimeoutMs,
    responseTimeoutMs: delivery.responseTimeoutMs,
    maxConnectionsPerOrigin: delivery.maxConnectionsPerOrigin,
  });
  const calls: RestHookCalls = {
    dispatcher,
    originCalls: new OriginCalls(delivery.maxConnectionsPerOrigin),
    tokens: oauth === undefined ? undefined : createTokenProvider(oauth),
  };
  return { calls, close: () => dispatcher.close() };
}
