import { z } from 'zod';
import { isResourceType } from '../fhir/definitions.ts';
import { FhirError, type OperationOutcome } from '../fhir/outcome.ts';
import { unstorableString } from '../fhir/storable-text.ts';
import { compileCriteria, type CompiledCriteria } from '../search/criteria.ts';

/**
 * What a POST of a Subscription asks for, validated. Refusals use the spec's
 * format: 400, code `exception`, details.text `ValidationError: ['<message>']`.
 */
export type SubscriptionRequest =
  | { status: 'off'; criteria: string }
  | {
      status: 'requested';
      criteria: string;
      compiled: CompiledCriteria;
      reason: string;
      endpoint: string;
      payload: string | undefined;
      /** channel.header as sent, each `Name: value`. */
      headers: string[];
      /** The value of the `secret` header, when the client sent one. */
      clientSecret: string | undefined;
      contactEmails: string[];
    };

export function refusal(message: string): FhirError {
  return new FhirError(400, 'exception', `ValidationError: ['${message}']`);
}

/** Any 400 outcome in the refusal format (a refusal stays as it is). */
export function asRefusal(outcome: OperationOutcome): OperationOutcome {
  const text = outcome.issue[0]?.details?.text ?? 'Bad request';
  return text.startsWith("ValidationError: ['") ? outcome : refusal(text).outcome;
}

/** `Name: value`, split on the first colon only: values may contain colons (and, to be refused by name, line breaks). */
const headerPattern = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(\S.*)$/s;
/** Headers the service sets itself; a client value would break signature checks. */
const serviceHeaders = new Set(['content-type', 'x-hub-signature', 'webhook-id', 'webhook-timestamp', 'webhook-signature']);
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

function isHttpUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
  } catch {
    return false;
  }
}

/** Criteria longer than this are refused: real ones are a few dozen characters, and each is compiled and evaluated on every write of its type. */
export const maxCriteriaLength = 2048;

export function parseSubscriptionRequest(body: unknown): SubscriptionRequest {
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

  if (resource.status === 'off') return { status: 'off', criteria };
  if (resource.status !== 'requested') throw refusal('Subscriptions must start with status=requested');

  const parsed = createSchema.safeParse(resource);
  if (!parsed.success) throw refusal(parsed.error.issues[0]!.message);
  const { reason, channel, contact: contacts = [] } = parsed.data;

  const resourceType = criteria.split('?')[0]!;
  if (!isResourceType(resourceType)) throw refusal(`criteria=${criteria} is not a valid FHIR resource`);
  const compiled = compileOrRefuse(criteria);

  const headers = channel.header ?? [];
  const secrets = headers.map((item) => headerPattern.exec(item)!).filter((match) => match[1]!.toLowerCase() === 'secret');
  if (secrets.length > 1) throw refusal('channel.header has more than one secret header');

  return {
    status: 'requested',
    criteria,
    compiled,
    reason,
    endpoint: channel.endpoint,
    payload: channel.payload,
    headers,
    clientSecret: secrets[0]?.[2],
    contactEmails: contacts.map((item) => item.value),
  };
}

function compileOrRefuse(criteria: string): CompiledCriteria {
  try {
    return compileCriteria(criteria);
  } catch (error) {
    if (error instanceof FhirError) throw refusal(`criteria=${criteria}: ${error.message}`);
    throw error;
  }
}
