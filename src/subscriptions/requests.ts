import { z } from 'zod';
import { isResourceType } from '../fhir/definitions.ts';
import { FhirError, refusal, type OperationOutcome } from '../fhir/outcome.ts';
import { unstorableString } from '../fhir/storable-text.ts';
import { compileCriteria, type CompiledCriteria } from '../search/criteria.ts';
import { maxQueryLength } from '../search/query.ts';
import { payloadContents, subscriptionStatuses, type ChannelType, type PayloadContent } from '../db/schema.ts';
import type { ChannelElement } from '../channels/channel.ts';
import { required } from '../channels/element.ts';
import { registeredChannels, requestedChannel } from '../channels/registry.ts';
import type { Brokers } from '../config/brokers.ts';
import { secretHeaderValues } from '../channels/rest-hook/element.ts';
import { backport } from '../topics/backport.ts';
import type { RetryPolicyBounds } from '../config/index.ts';
import { parseRetryPolicy, type RetryPolicy } from './retry-policy.ts';

/**
 * What a POST of a Subscription asks for, validated. Refusals use the spec's
 * format: 400, code `exception`, details.text `ValidationError: ['<message>']`.
 */
export type SubscriptionRequest =
  | { status: 'off'; criteria: string; filterCriteria: string[] | undefined }
  | ({ status: 'requested'; criteria: string } & Channel & (ClassicCriteria | TopicCriteria));

/** A classic subscription's criteria, compiled (`Patient?name=smith`). */
type ClassicCriteria = { kind: 'criteria'; compiled: CompiledCriteria };

/**
 * A topic-based subscription (Backport IG): `criteria` is the topic's
 * canonical, resolved and its filters checked against it by the store.
 */
export type TopicCriteria = {
  kind: 'topic';
  /** The backport-filter-criteria values, sorted (what uniqueness compares). */
  filterCriteria: string[];
  payloadContent: PayloadContent;
  heartbeatPeriodSeconds: number | undefined;
  timeoutSeconds: number | undefined;
  maxCount: number | undefined;
};

/** Where and how the service calls the subscriber, whatever the subscription is on. */
type Channel = {
  reason: string;
  /** A registered channel's (src/channels/registry.ts); one only a topic may use, on a topic. */
  channelType: ChannelType;
  /** The subscriber's endpoint; for a channel whose receivers connect to the service, the URL they connect to. */
  endpoint: string;
  payload: string | undefined;
  /** channel.header as sent, each `Name: value`. */
  headers: string[];
  /** The value of the `secret` header, when the client sent one. */
  clientSecret: string | undefined;
  contactEmails: string[];
  /** The subscription's own limit of calls a second (the max-calls-per-second extension on channel). */
  maxCallsPerSecond: number | undefined;
  /** The calls in flight at once the subscription asks for (the parallel-calls extension on channel). */
  parallelCalls: number | undefined;
  /** Its attempts and delays, when it says its own (src/subscriptions/retry-policy.ts). */
  retryPolicy: RetryPolicy;
};

/** What a request is checked against besides itself. */
export type RequestLimits = {
  /** How long the service waits for a subscriber's answer (DELIVERY_RESPONSE_TIMEOUT_MS): a backport-timeout may not exceed it. */
  responseTimeoutMs: number;
  /** Public base URL, without a trailing slash: the service's own extensions are named under it. */
  baseUrl: string;
  /** What a subscription's own retry policy may ask for (RETRY_POLICY_*). */
  retryPolicyBounds: RetryPolicyBounds;
  /** The message brokers a subscription may name (BROKERS). */
  brokers: Brokers;
};

/**
 * The service's extension on channel that limits the calls a second to the
 * subscriber (valueDecimal), named under the service's base as its
 * identifier tag system is.
 */
export function maxCallsPerSecondExtension(baseUrl: string): string {
  return `${baseUrl}/fhir/resources/StructureDefinition/max-calls-per-second`;
}

/** The highest limit one may ask for: beyond it, a limit means nothing. */
const maxMaxCallsPerSecond = 10_000;

/**
 * The service's extension on channel that sets how many calls to the
 * subscriber may be in flight at once (valuePositiveInt), within
 * DELIVERY_PARALLEL_CALLS: without it, one for a topic-based subscription
 * (its receiver reads the events in number order) and DELIVERY_PARALLEL_CALLS
 * for a classic one.
 */
export function parallelCallsExtension(baseUrl: string): string {
  return `${baseUrl}/fhir/resources/StructureDefinition/parallel-calls`;
}

/**
 * The most calls in flight one subscription may ask for: the most
 * DELIVERY_PARALLEL_CALLS may be (src/config/index.ts), since a subscription
 * gets no more than the service's own number.
 */
export const maxParallelCalls = 100;

/** A refusal's own words, without the spec's wrapping (which is for HTTP clients): what a terminal shows. */
export function refusalReason(error: FhirError): string {
  return /^ValidationError: \['(.*)'\]$/s.exec(error.message)?.[1] ?? error.message;
}

/** Any 400 outcome in the refusal format (a refusal stays as it is). */
export function asRefusal(outcome: OperationOutcome): OperationOutcome {
  const text = outcome.issue[0]?.details?.text ?? 'Bad request';
  return text.startsWith("ValidationError: ['") ? outcome : refusal(text).outcome;
}

const contact = z
  .object(
    {
      system: z.literal('email', {
        error: (issue) =>
          issue.input === undefined
            ? 'contact.system is required'
            : typeof issue.input === 'string'
              ? 'Only contact system=email are supported.'
              : 'contact.system must be a string',
      }),
      value: z.string(required('contact.value')),
    },
    { error: 'contact items must be objects with system and value' },
  )
  .superRefine(({ value }, context) => {
    if (!z.email().safeParse(value).success) context.addIssue({ code: 'custom', message: `The contact email "${value}" is invalid.` });
  });

/** What a request's criteria, reason and contact are checked against, and what /docs says of them. */
const criteriaField = z
  .string(required('criteria'))
  .min(1, 'criteria is required')
  .describe('A search (Patient?name=smith), or the canonical URL of a topic (docs/topics.md)');
const reasonField = z.string(required('reason')).min(1, 'reason is required');
const contactField = z.array(contact, { error: 'contact must be an array' }).optional();

const extension = z.looseObject({ url: z.string() }).describe('A FHIR extension: its url and one value[x]');
const extensions = z.object({ extension: z.array(extension) });

/**
 * A Subscription as the service takes and shows it, for /docs
 * (src/api/schemas.ts): the fields a request is checked against (its channel
 * any registered channel's element, with the Backport IG's extensions, which
 * the request reads itself), and those the service sets.
 */
export const subscriptionResource = z.looseObject({
  resourceType: z.literal('Subscription'),
  id: z.string().optional(),
  meta: z.looseObject({ versionId: z.string(), lastUpdated: z.string(), tag: z.array(z.object({ system: z.string(), code: z.string() })) }).optional(),
  status: z.enum(subscriptionStatuses),
  criteria: criteriaField,
  extension: z
    .array(extension)
    .optional()
    .describe(
      "Its retry policy: the service's retry-policy (maxAttempts, firstDelay, growth, maxDelay), HAPI's subscription-delivery-retry-count or Medplum's subscription-max-attempts (docs/subscriptions.md)",
    ),
  _criteria: extensions.optional().describe('On a topic: its filters, backport-filter-criteria extensions (valueString Encounter?patient=Patient/123)'),
  reason: reasonField,
  error: z.string().optional(),
  end: z.string().optional(),
  contact: contactField,
  channel: z.union(
    registeredChannels.map((channel) =>
      channel.element
        .extend({
          extension: z.array(extension).optional().describe('On a topic: backport-heartbeat-period, backport-timeout (seconds), backport-max-count'),
          _payload: extensions.optional().describe('On a topic (required): backport-payload-content, valueCode empty, id-only or full-resource'),
        })
        .loose(),
    ),
  ),
});

/**
 * Criteria longer than a search's whole query are refused: the search parser
 * bounds each parameter as well (maxAlternativeLength per comma-separated
 * alternative, maxAlternatives of them), so `_id=` with 30 UUIDs or a name
 * with 51 alternatives of 200 characters pass. The indexes on criteria hold
 * its digest (migrations 0011 and 0023), so any length fits them.
 */
export const maxCriteriaLength = maxQueryLength;

export function parseSubscriptionRequest(body: unknown, limits: RequestLimits): SubscriptionRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw refusal('The body must be a Subscription resource (a JSON object)');
  const resource = body as Record<string, unknown>;
  if (resource.resourceType !== 'Subscription') {
    throw refusal(resource.resourceType === undefined ? 'resourceType is required' : 'resourceType must be Subscription');
  }
  // Text PostgreSQL cannot store (in the criteria, the endpoint, a header) would fail the insert with a 500.
  const problem = unstorableString(resource);
  if (problem !== undefined) throw refusal(`The Subscription has a string with ${problem}`);
  if (resource.status === undefined) throw refusal('status is required');
  if (typeof resource.criteria !== 'string' || resource.criteria === '') throw refusal('criteria is required');
  const criteria = resource.criteria;
  if (criteria.length > maxCriteriaLength) {
    throw refusal(`criteria is ${criteria.length.toLocaleString('en')} characters long; the limit is ${maxCriteriaLength.toLocaleString('en')}`);
  }
  const onTopic = isTopicCanonical(criteria);
  const filterCriteria = onTopic ? parseFilterCriteria(resource._criteria) : undefined;
  if (!onTopic && resource._criteria !== undefined)
    throw refusal('_criteria (filters on a topic) applies to topic-based subscriptions; a criteria such as Patient?name=smith holds its filters itself');

  if (resource.status === 'off') return { status: 'off', criteria, filterCriteria };
  if (resource.status !== 'requested') throw refusal('Subscriptions must start with status=requested');
  const named = requestedChannel(resource.channel, limits.baseUrl);
  // A classic subscription keeps the specification's channels (unusableChannel refuses the others).
  const channel = named !== undefined && (onTopic || !named.topicOnly) ? named : undefined;
  const parsed = requestSchema(channel?.element ?? unusableChannel).safeParse(resource);
  if (!parsed.success) throw refusal(parsed.error.issues[0]!.message);
  const { reason, contact: contacts = [] } = parsed.data;
  const element = parsed.data.channel as ChannelElement;
  // unusableChannel refused the channels the subscription may not use.
  const { type, receivers } = channel!;
  // What the element cannot judge alone: a broker's destination against the operator's brokers.
  const endpointProblem = receivers.at === 'endpoint' ? channel!.endpointRefusal?.(element.endpoint!, limits) : undefined;
  if (endpointProblem !== undefined) throw refusal(endpointProblem);

  const headers = element.header ?? [];
  const secrets = secretHeaderValues(headers);
  if (secrets.length > 1) throw refusal('channel.header has more than one secret header');
  const channelExtensions = extensionsAt('channel', resource.channel);
  const common = {
    status: 'requested' as const,
    criteria,
    reason,
    channelType: type,
    // The element requires an endpoint of a channel whose receivers are at one.
    endpoint: receivers.at === 'service' ? receivers.url(limits.baseUrl) : element.endpoint!,
    payload: element.payload,
    headers,
    clientSecret: secrets[0],
    contactEmails: contacts.map((item) => item.value),
    retryPolicy: parseRetryPolicy(extensionsAt('Subscription', resource), channelExtensions, limits.retryPolicyBounds, limits.baseUrl),
    ...(receivers.at === 'endpoint' ? callSettings(channelExtensions, limits) : refuseCallSettings(type, channelExtensions, limits)),
  };
  if (onTopic) {
    const payloadExtensions = extensionsAt('channel._payload', (resource.channel as { _payload?: unknown })._payload);
    return { ...common, kind: 'topic', filterCriteria: filterCriteria!, ...parseBackportChannel(channelExtensions, payloadExtensions, limits) };
  }

  const resourceType = criteria.split('?')[0]!;
  if (!isResourceType(resourceType)) throw refusal(`criteria=${criteria} is not a valid FHIR resource`);
  return { ...common, kind: 'criteria', compiled: compileOrRefuse(criteria) };
}

/**
 * A request's fields, its channel checked against the element of the channel
 * it names (src/channels/): what /docs describes of them too.
 */
function requestSchema(element: z.ZodObject) {
  return z.object({ criteria: criteriaField, reason: reasonField, channel: element, contact: contactField });
}

/** The classic subscriptions' channels: the specification's rest-hook. */
const classicChannelTypes = registeredChannels.filter((channel) => !channel.topicOnly).map((channel) => channel.type);

/** A channel element whose type names no channel the subscription may use: refused as the specification does. */
const unusableChannel = z.object(
  { type: z.string(required('channel.type')).refine(() => false, `Only channel=${classicChannelTypes.join(', ')} subscriptions are supported`) },
  { error: 'channel is required' },
);

/** The channel's settings of calls to the subscriber's endpoint: its limits of calls a second and in flight. */
function callSettings(extensions: Extension[], limits: RequestLimits): Pick<Channel, 'maxCallsPerSecond' | 'parallelCalls'> {
  return { maxCallsPerSecond: parseMaxCallsPerSecond(extensions, limits.baseUrl), parallelCalls: parseParallelCalls(extensions, limits.baseUrl) };
}

/**
 * A channel whose receivers connect to the service: the topic's channel
 * settings that still mean something without calls (payload content,
 * heartbeat period, max count) are read as for any; those about calls to an
 * endpoint are refused.
 */
function refuseCallSettings(type: ChannelType, extensions: Extension[], limits: RequestLimits): Pick<Channel, 'maxCallsPerSecond' | 'parallelCalls'> {
  const settings = [
    [backport.timeout, 'backport-timeout'],
    [maxCallsPerSecondExtension(limits.baseUrl), 'max-calls-per-second'],
    [parallelCallsExtension(limits.baseUrl), 'parallel-calls'],
  ] as const;
  for (const [url, name] of settings) {
    if (extensions.some((item) => item.url === url)) throw refusal(`channel's ${name} is about calls to a rest-hook endpoint; a ${type} subscription has none`);
  }
  return { maxCallsPerSecond: undefined, parallelCalls: undefined };
}

/**
 * A topic's canonical URL (`http://example.org/topics/encounter-finished`,
 * with `|version` perhaps) rather than a search: a search starts with a
 * resource type, which has no colon.
 */
export function isTopicCanonical(criteria: string): boolean {
  return /^(https?|urn):/i.test(criteria);
}

/** A heartbeat is claimed and recorded as an attempt (a call for rest-hook, a published notification for websocket), whatever the channel: one a second per subscription would be a load of its own. */
export const minHeartbeatPeriodSeconds = 10;

/** The most filters one subscription may set: each is evaluated on every write the topic fires on. */
const maxFilters = 20;

type Extension = { url: string; [value: string]: unknown };

/** The extensions of `element` (an object with an `extension` array, or nothing), refused by name when malformed. */
function extensionsAt(where: string, element: unknown): Extension[] {
  const parsed = z
    .object(
      { extension: z.array(z.looseObject({ url: z.string() }), { error: `${where}.extension must be an array of extensions with a url` }).optional() },
      { error: `${where} must be an object` },
    )
    .optional()
    .safeParse(element);
  if (!parsed.success) throw refusal(parsed.error.issues[0]!.message);
  return parsed.data?.extension ?? [];
}

/** Subscription._criteria's backport-filter-criteria values, sorted. */
function parseFilterCriteria(element: unknown): string[] {
  const filters = extensionsAt('_criteria', element).map((item) => {
    // An extension the service does not know (another version's filter-criteria, say) would change what the subscription means if ignored.
    if (item.url !== backport.filterCriteria)
      throw refusal(`_criteria has an extension this service does not support: ${item.url} (filters are ${backport.filterCriteria})`);
    if (typeof item.valueString !== 'string' || item.valueString === '')
      throw refusal('A backport-filter-criteria extension must have a valueString such as Encounter?patient=Patient/123');
    // Each filter is evaluated on every write its topic fires on, as a classic criteria is on every write of its type.
    if (item.valueString.length > maxCriteriaLength) {
      throw refusal(
        `A backport-filter-criteria is ${item.valueString.length.toLocaleString('en')} characters long; the limit is ${maxCriteriaLength.toLocaleString('en')}`,
      );
    }
    return item.valueString;
  });
  if (filters.length > maxFilters) throw refusal(`_criteria has ${filters.length} backport-filter-criteria extensions; the limit is ${maxFilters}`);
  if (new Set(filters).size < filters.length) throw refusal('_criteria has the same backport-filter-criteria twice');
  return filters.sort();
}

/** The Backport IG's extensions on a topic-based subscription's channel. */
function parseBackportChannel(extensions: Extension[], payloadExtensions: Extension[], limits: RequestLimits): Omit<TopicCriteria, 'kind' | 'filterCriteria'> {
  const content = single(payloadExtensions, backport.payloadContent, 'valueCode');
  if (content !== undefined && !(payloadContents as readonly unknown[]).includes(content)) {
    throw refusal(`channel.payload's backport-payload-content must be ${payloadContents.join(', ')}`);
  }
  if (content === undefined)
    throw refusal(`channel._payload needs a backport-payload-content extension (${payloadContents.join(', ')}): how much of each event a notification carries`);
  const seconds = (url: string, name: string, least: number) => {
    const value = single(extensions, url, 'valueUnsignedInt');
    if (value !== undefined && (!Number.isInteger(value) || (value as number) < least || (value as number) > 2_147_483_647)) {
      throw refusal(`channel's ${name} must be a whole number of seconds, at least ${least}`);
    }
    return value as number | undefined;
  };
  const heartbeatPeriodSeconds = seconds(backport.heartbeatPeriod, 'backport-heartbeat-period', minHeartbeatPeriodSeconds);
  const timeoutSeconds = seconds(backport.timeout, 'backport-timeout', 1);
  const budgetSeconds = Math.floor(limits.responseTimeoutMs / 1000);
  if (timeoutSeconds !== undefined && timeoutSeconds > budgetSeconds) {
    throw refusal(`channel's backport-timeout is ${timeoutSeconds} seconds; this service waits at most ${budgetSeconds} seconds for a subscriber's answer`);
  }
  const maxCount = single(extensions, backport.maxCount, 'valuePositiveInt');
  if (maxCount !== undefined && (!Number.isInteger(maxCount) || (maxCount as number) < 1 || (maxCount as number) > 2_147_483_647))
    throw refusal("channel's backport-max-count must be a positive whole number");
  return { payloadContent: content as PayloadContent, heartbeatPeriodSeconds, timeoutSeconds, maxCount: maxCount as number | undefined };
}

/** The max-calls-per-second extension on channel, if given: a decimal above 0, at most 10,000. */
function parseMaxCallsPerSecond(extensions: Extension[], baseUrl: string): number | undefined {
  const value = single(extensions, maxCallsPerSecondExtension(baseUrl), 'valueDecimal');
  if (value !== undefined && (typeof value !== 'number' || !(value > 0) || value > maxMaxCallsPerSecond)) {
    throw refusal(`channel's max-calls-per-second must be a valueDecimal above 0, at most ${maxMaxCallsPerSecond.toLocaleString('en')}`);
  }
  return value;
}

/** The parallel-calls extension on channel, if given: a whole number from 1 to maxParallelCalls. */
function parseParallelCalls(extensions: Extension[], baseUrl: string): number | undefined {
  const value = single(extensions, parallelCallsExtension(baseUrl), 'valuePositiveInt');
  if (value !== undefined && (!Number.isInteger(value) || (value as number) < 1 || (value as number) > maxParallelCalls)) {
    throw refusal(`channel's parallel-calls must be a valuePositiveInt from 1 to ${maxParallelCalls}`);
  }
  return value as number | undefined;
}

/** The value of the one extension with `url` (refused when given twice or without a value of its type). */
function single(extensions: Extension[], url: string, valueKey: string): unknown {
  const found = extensions.filter((item) => item.url === url);
  const name = url.slice(url.lastIndexOf('/') + 1);
  if (found.length > 1) throw refusal(`${name} is given ${found.length} times`);
  if (found.length === 0) return undefined;
  if (found[0]![valueKey] === undefined) throw refusal(`${name} needs a ${valueKey}`);
  return found[0]![valueKey];
}

function compileOrRefuse(criteria: string): CompiledCriteria {
  try {
    return compileCriteria(criteria);
  } catch (error) {
    if (error instanceof FhirError) throw refusal(`criteria=${criteria}: ${error.message}`);
    throw error;
  }
}
