import { z } from 'zod';
import { isResourceType } from '../fhir/definitions.ts';
import { FhirError, type OperationOutcome } from '../fhir/outcome.ts';
import { unstorableString } from '../fhir/storable-text.ts';
import { compileCriteria, type CompiledCriteria } from '../search/criteria.ts';
import { maxQueryLength } from '../search/query.ts';
import { payloadContents, type ChannelType, type PayloadContent } from '../db/schema.ts';
import { backport } from '../topics/backport.ts';

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
  /** rest-hook; websocket only on a topic. */
  channelType: ChannelType;
  /** A rest-hook subscription's endpoint; undefined for a websocket one (its clients connect to the service). */
  endpoint: string | undefined;
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
};

/** What a request is checked against besides itself. */
export type RequestLimits = {
  /** How long the service waits for a subscriber's answer (DELIVERY_RESPONSE_TIMEOUT_MS): a backport-timeout may not exceed it. */
  responseTimeoutMs: number;
  /** Public base URL, without a trailing slash: the service's own extensions are named under it. */
  baseUrl: string;
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

export function refusal(message: string): FhirError {
  return new FhirError(400, 'exception', `ValidationError: ['${message}']`);
}

/** A refusal's own words, without the spec's wrapping (which is for HTTP clients): what a terminal shows. */
export function refusalReason(error: FhirError): string {
  return /^ValidationError: \['(.*)'\]$/s.exec(error.message)?.[1] ?? error.message;
}

/** Any 400 outcome in the refusal format (a refusal stays as it is). */
export function asRefusal(outcome: OperationOutcome): OperationOutcome {
  const text = outcome.issue[0]?.details?.text ?? 'Bad request';
  return text.startsWith("ValidationError: ['") ? outcome : refusal(text).outcome;
}

/** `Name: value`, split on the first colon only: values may contain colons (and, to be refused by name, line breaks). */
const headerPattern = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(\S.*)$/s;
/** Headers the service sets itself; a client value would break signature checks. */
const serviceHeaders = new Set(['content-type', 'x-hub-signature', 'x-hub-signature-next', 'webhook-id', 'webhook-timestamp', 'webhook-signature']);
/** Headers about the connection or the message's framing, which the HTTP client owns: a value from a client could never be sent as given. */
const transportHeaders = new Set([
  'content-length',
  'transfer-encoding',
  'host',
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
  'expect',
]);
/** What one subscription may ask to be sent with every call. */
const maxHeaders = 50;
const maxHeaderLength = 4096;
/** A header value is Latin-1 text without control characters (a tab aside): what HTTP can carry. */
const headerValuePattern = /^[\t\x20-\x7e\x80-\xff]*$/;
const acceptedPayloads = new Set(['application/fhir+json', 'application/json']);

const required = (name: string) => ({ error: (issue: { input: unknown }) => (issue.input === undefined ? `${name} is required` : `${name} must be a string`) });

/**
 * channel.header: items that can be sent as given. A refusal names the item
 * by its position and its header name, never its value, which may be a secret.
 */
const headers = z
  .array(z.string({ error: 'channel.header items must be strings of the form "Name: value"' }), { error: 'channel.header must be an array of strings' })
  .max(maxHeaders, `channel.header has more than ${maxHeaders} items`)
  .superRefine((items, context) => {
    items.forEach((item, index) => {
      const problem = headerProblem(item);
      if (problem !== undefined) context.addIssue({ code: 'custom', message: `channel.header item ${index + 1} ${problem}` });
    });
  });

function headerProblem(item: string): string | undefined {
  if (item.length > maxHeaderLength) return `is longer than ${maxHeaderLength} characters`;
  const match = headerPattern.exec(item);
  if (!match) return 'is not of the form "Name: value"';
  const name = match[1]!;
  if (serviceHeaders.has(name.toLowerCase())) return `(${name}) is set by the service, and a client value would break signature checks`;
  if (transportHeaders.has(name.toLowerCase())) return `(${name}) is about the connection, which the service's HTTP client manages`;
  if (!headerValuePattern.test(match[2]!)) return `(${name}) has a value HTTP cannot carry (control characters, or characters beyond Latin-1)`;
  return undefined;
}

/** A channel.header item's name as written, or undefined when it is not `Name: value`. */
export function headerName(item: string): string | undefined {
  return headerPattern.exec(item)?.[1];
}

/**
 * Why `value` cannot be a signing secret given on its own (a rotation's new
 * secret), or undefined when it can: what the value of a `secret` header may
 * be when a subscription is created, and whole (white space around it would
 * be lost from the header that carries it). It never names the value.
 */
export function secretValueProblem(value: string): string | undefined {
  const longest = maxHeaderLength - 'secret: '.length;
  if (value === '') return 'is empty';
  if (value.length > longest) return `is longer than ${longest} characters`;
  if (!headerValuePattern.test(value)) return 'has characters HTTP cannot carry (control characters, or characters beyond Latin-1)';
  if (/^[ \t]|[ \t]$/.test(value)) return 'begins or ends with white space, which the secret header would lose';
  return undefined;
}

const contact = z.object(
  {
    system: z.string(required('contact.system')).refine((system) => system === 'email', 'Only contact system=email are supported.'),
    value: z.string(required('contact.value')),
  },
  { error: 'contact items must be objects with system and value' },
).superRefine(({ system, value }, context) => {
  if (system === 'email' && !z.email().safeParse(value).success) {
    context.addIssue({ code: 'custom', message: `The contact email "${value}" is invalid.` });
  }
});

const createSchema = z.object({
  criteria: z.string(required('criteria')).min(1, 'criteria is required'),
  reason: z.string(required('reason')).min(1, 'reason is required'),
  channel: z.object(
    {
      type: z.string(required('channel.type')).refine((type) => type === 'rest-hook', 'Only channel=rest-hook subscriptions are supported'),
      endpoint: z.string(required('channel.endpoint')).refine(isHttpUrl, 'channel.endpoint must be an absolute http or https URL'),
      payload: z.string().refine((payload) => acceptedPayloads.has(payload), 'channel.payload must be application/fhir+json').optional(),
      header: headers.optional(),
    },
    { error: 'channel is required' },
  ),
  contact: z.array(contact, { error: 'contact must be an array' }).optional(),
});

/** An element that must not be given: `message` says why. */
const absent = (message: string) => z.unknown().refine(() => false, message).optional();

/**
 * A topic-based subscription's websocket channel (Backport IG): no endpoint
 * (its clients connect to the service and bind with $get-ws-binding-token's
 * token), no headers (nothing is called). What concerns only calls to an
 * endpoint is refused by name below (parseWebsocketChannel).
 */
const websocketSchema = z.object({
  criteria: z.string(),
  reason: z.string(required('reason')).min(1, 'reason is required'),
  channel: z.object({
    type: z.literal('websocket'),
    endpoint: absent("channel.endpoint is for rest-hook: a websocket subscription's clients connect to the service (the websocket-url of $get-ws-binding-token)"),
    payload: z.string().refine((payload) => acceptedPayloads.has(payload), 'channel.payload must be application/fhir+json').optional(),
    header: absent('channel.header is sent with rest-hook calls; a websocket subscription has none (its clients authenticate with a binding token)'),
  }),
  contact: z.array(contact, { error: 'contact must be an array' }).optional(),
});

function isHttpUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
  } catch {
    return false;
  }
}

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
  if (!onTopic && resource._criteria !== undefined) throw refusal('_criteria (filters on a topic) applies to topic-based subscriptions; a criteria such as Patient?name=smith holds its filters itself');

  if (resource.status === 'off') return { status: 'off', criteria, filterCriteria };
  if (resource.status !== 'requested') throw refusal('Subscriptions must start with status=requested');
  // A classic subscription keeps the specification's refusal of any channel but rest-hook (createSchema).
  if (onTopic && (resource.channel as { type?: unknown } | undefined)?.type === 'websocket') return parseWebsocketSubscription(resource, criteria, filterCriteria!, limits);

  const parsed = createSchema.safeParse(resource);
  if (!parsed.success) throw refusal(parsed.error.issues[0]!.message);
  const { reason, channel, contact: contacts = [] } = parsed.data;

  const headers = channel.header ?? [];
  const secrets = headers.map((item) => headerPattern.exec(item)!).filter((match) => match[1]!.toLowerCase() === 'secret');
  if (secrets.length > 1) throw refusal('channel.header has more than one secret header');
  const channelExtensions = extensionsAt('channel', resource.channel);
  const common = {
    status: 'requested' as const,
    criteria,
    reason,
    channelType: 'rest-hook' as const,
    endpoint: channel.endpoint,
    payload: channel.payload,
    headers,
    clientSecret: secrets[0]?.[2],
    contactEmails: contacts.map((item) => item.value),
    maxCallsPerSecond: parseMaxCallsPerSecond(channelExtensions, limits.baseUrl),
    parallelCalls: parseParallelCalls(channelExtensions, limits.baseUrl),
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
 * A topic-based subscription with channel.type websocket: the topic's
 * channel settings that still mean something without calls (payload content,
 * heartbeat period, max count); those about calls to an endpoint refused.
 */
function parseWebsocketSubscription(resource: Record<string, unknown>, criteria: string, filterCriteria: string[], limits: RequestLimits): SubscriptionRequest {
  const parsed = websocketSchema.safeParse(resource);
  if (!parsed.success) throw refusal(parsed.error.issues[0]!.message);
  const channelExtensions = extensionsAt('channel', resource.channel);
  const callSettings = [
    [backport.timeout, 'backport-timeout'],
    [maxCallsPerSecondExtension(limits.baseUrl), 'max-calls-per-second'],
    [parallelCallsExtension(limits.baseUrl), 'parallel-calls'],
  ] as const;
  for (const [url, name] of callSettings) {
    if (channelExtensions.some((item) => item.url === url)) throw refusal(`channel's ${name} is about calls to a rest-hook endpoint; a websocket subscription has none`);
  }
  const payloadExtensions = extensionsAt('channel._payload', (resource.channel as { _payload?: unknown })._payload);
  return {
    status: 'requested',
    criteria,
    reason: parsed.data.reason,
    channelType: 'websocket',
    endpoint: undefined,
    payload: parsed.data.channel.payload,
    headers: [],
    clientSecret: undefined,
    contactEmails: (parsed.data.contact ?? []).map((item) => item.value),
    maxCallsPerSecond: undefined,
    parallelCalls: undefined,
    kind: 'topic',
    filterCriteria,
    ...parseBackportChannel(channelExtensions, payloadExtensions, limits),
  };
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
    .object({ extension: z.array(z.looseObject({ url: z.string() }), { error: `${where}.extension must be an array of extensions with a url` }).optional() }, { error: `${where} must be an object` })
    .optional()
    .safeParse(element);
  if (!parsed.success) throw refusal(parsed.error.issues[0]!.message);
  return parsed.data?.extension ?? [];
}

/** Subscription._criteria's backport-filter-criteria values, sorted. */
function parseFilterCriteria(element: unknown): string[] {
  const filters = extensionsAt('_criteria', element).map((item) => {
    // An extension the service does not know (another version's filter-criteria, say) would change what the subscription means if ignored.
    if (item.url !== backport.filterCriteria) throw refusal(`_criteria has an extension this service does not support: ${item.url} (filters are ${backport.filterCriteria})`);
    if (typeof item.valueString !== 'string' || item.valueString === '') throw refusal('A backport-filter-criteria extension must have a valueString such as Encounter?patient=Patient/123');
    // Each filter is evaluated on every write its topic fires on, as a classic criteria is on every write of its type.
    if (item.valueString.length > maxCriteriaLength) {
      throw refusal(`A backport-filter-criteria is ${item.valueString.length.toLocaleString('en')} characters long; the limit is ${maxCriteriaLength.toLocaleString('en')}`);
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
  if (content === undefined) throw refusal(`channel._payload needs a backport-payload-content extension (${payloadContents.join(', ')}): how much of each event a notification carries`);
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
  if (maxCount !== undefined && (!Number.isInteger(maxCount) || (maxCount as number) < 1 || (maxCount as number) > 2_147_483_647)) throw refusal("channel's backport-max-count must be a positive whole number");
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
