import type { Brokers } from '../../config/brokers.ts';
import { unknownBrokerRefusal } from '../broker.ts';

/**
 * Where a rabbitmq subscription publishes: its endpoint names one of the
 * operator's RabbitMQ brokers (BROKERS), an exchange the operator allows
 * there, and a routing key, `rabbitmq://integration/fhir/encounter.finished`.
 * A subscription never names a host.
 */
export type Destination = { broker: string; exchange: string; routingKey: string };

export const endpointScheme = 'rabbitmq://';

/** The broker, exchange and routing key of an endpoint, or undefined when it is not one. */
export function destinationOf(endpoint: string): Destination | undefined {
  const match = /^rabbitmq:\/\/([a-z0-9][a-z0-9-]{0,62})\/([A-Za-z0-9_.:-]{1,255})\/([!-~]{1,255})$/.exec(endpoint);
  if (match === null) return undefined;
  const [, broker, exchange, routingKey] = match;
  return { broker: broker!, exchange: exchange!, routingKey: routingKey! };
}

/** Why a subscription may not publish to `endpoint` (a refusal's text), or undefined when it may. */
export function destinationRefusal(endpoint: string, brokers: Brokers): string | undefined {
  const destination = destinationOf(endpoint);
  if (destination === undefined) {
    return `channel.endpoint must be ${endpointScheme}<broker>/<exchange>/<routing key>, such as ${endpointScheme}integration/fhir/encounter.finished`;
  }
  const broker = brokers[destination.broker];
  if (broker?.type !== 'rabbitmq') return unknownBrokerRefusal(brokers, destination.broker, 'rabbitmq', 'RabbitMQ');
  if (!broker.exchanges.includes(destination.exchange)) {
    return `channel.endpoint's exchange ${destination.exchange} is not one the broker ${destination.broker} takes from subscriptions (${broker.exchanges.join(', ')})`;
  }
  return undefined;
}
