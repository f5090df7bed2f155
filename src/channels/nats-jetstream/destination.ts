import type { Brokers } from '../../config/brokers.ts';
import { unknownBrokerRefusal } from '../broker.ts';

/**
 * Where a nats-jetstream subscription publishes: its endpoint names one of
 * the operator's brokers (BROKERS) and a subject in it,
 * `nats-jetstream://events/fhir.encounter.finished`. The operator's
 * configuration says which subjects subscriptions may use; a subscription
 * never names a host.
 */
export type Destination = { broker: string; subject: string };

export const endpointScheme = 'nats-jetstream://';

/**
 * The broker and subject of an endpoint, or undefined when it is not one. A
 * subject of 255 characters at most: a NATS server closes the connection on
 * a protocol line over its max_control_line (4,096 bytes by default), and the
 * connection is every subscription's on that broker.
 */
export function destinationOf(endpoint: string): Destination | undefined {
  const match = /^nats-jetstream:\/\/([a-z0-9][a-z0-9-]{0,62})\/([!-~]{1,255})$/.exec(endpoint);
  if (match === null) return undefined;
  const [, broker, subject] = match;
  // A subject to publish to is whole tokens, without the wildcards only a pattern has.
  if (subject!.split('.').some((token) => token === '' || /[*>]/.test(token))) return undefined;
  return { broker: broker!, subject: subject! };
}

/** Whether `subject` is one `pattern` takes, as NATS matches them: `*` one token, `>` one or more at the end. */
export function subjectMatches(subject: string, pattern: string): boolean {
  const tokens = subject.split('.');
  const wanted = pattern.split('.');
  for (const [index, token] of wanted.entries()) {
    if (token === '>') return tokens.length > index;
    if (index >= tokens.length || (token !== '*' && token !== tokens[index])) return false;
  }
  return tokens.length === wanted.length;
}

/** Why a subscription may not publish to `endpoint` (a refusal's text), or undefined when it may. */
export function destinationRefusal(endpoint: string, brokers: Brokers): string | undefined {
  const destination = destinationOf(endpoint);
  if (destination === undefined)
    return `channel.endpoint must be ${endpointScheme}<broker>/<subject> (a subject of at most 255 characters, without wildcards), such as ${endpointScheme}events/fhir.encounter`;
  const broker = brokers[destination.broker];
  if (broker?.type !== 'nats-jetstream') return unknownBrokerRefusal(brokers, destination.broker, 'nats-jetstream', 'NATS');
  if (!broker.subjects.some((pattern) => subjectMatches(destination.subject, pattern))) {
    return `channel.endpoint's subject ${destination.subject} is not one the broker ${destination.broker} takes from subscriptions (${broker.subjects.join(', ')})`;
  }
  return undefined;
}
