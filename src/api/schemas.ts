import { z } from 'zod';
import { registeredChannels } from '../channels/registry.ts';
import { subscriptionResource } from '../subscriptions/requests.ts';

/**
 * What the API's answers look like, for its OpenAPI description (/docs):
 * the FHIR shapes the routes send, with examples taken from the spec. They
 * document and never filter: FHIR resources carry any element, so answers are
 * serialized as they are (app.ts), not through these schemas. Requests are
 * validated by each route's own schemas; a Subscription's schema is the one
 * its requests are checked against (src/subscriptions/requests.ts).
 */

const example = <T>(value: T) => ({ example: value });

export const operationOutcome = z
  .looseObject({
    resourceType: z.literal('OperationOutcome'),
    issue: z
      .array(
        z.looseObject({
          severity: z.enum(['fatal', 'error', 'warning', 'information']),
          code: z.string().describe('The FHIR issue type: invalid, not-found, security, forbidden, conflict, too-costly, throttled, transient, …'),
          details: z.object({ text: z.string() }).optional(),
          diagnostics: z.string().optional(),
        }),
      )
      .min(1),
  })
  .describe('What went wrong (FHIR OperationOutcome)')
  .meta(example({ resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'not-found', details: { text: 'Patient/123 is not known' } }] }));

export const resource = z
  .looseObject({
    resourceType: z.string(),
    id: z.string().optional(),
    meta: z.looseObject({ versionId: z.string().optional(), lastUpdated: z.string().optional() }).optional(),
  })
  .describe('A FHIR R4 resource')
  .meta(
    example({
      resourceType: 'Patient',
      id: '8b1f0c3e-5d2a-4e8b-9c71-2f6a1d3e4b50',
      meta: { versionId: '1', lastUpdated: '2025-03-04T05:06:07.123456Z' },
      active: true,
    }),
  );

const bundleEntry = z.looseObject({
  fullUrl: z.string().optional(),
  resource: resource.optional(),
  search: z.object({ mode: z.enum(['match', 'include', 'outcome']) }).optional(),
  request: z.looseObject({ method: z.string(), url: z.string() }).optional(),
  response: z
    .looseObject({
      status: z.string(),
      location: z.string().optional(),
      etag: z.string().optional(),
      lastModified: z.string().optional(),
      outcome: operationOutcome.optional(),
    })
    .optional(),
});

export const bundle = z
  .looseObject({
    resourceType: z.literal('Bundle'),
    id: z.string().optional(),
    type: z.enum(['searchset', 'history', 'transaction-response', 'batch-response', 'transaction', 'batch', 'document', 'collection', 'message']),
    total: z.number().int().optional(),
    link: z.array(z.object({ relation: z.string(), url: z.string() })).optional(),
    entry: z.array(bundleEntry).optional(),
  })
  .describe('A FHIR Bundle');

export const subscription = subscriptionResource
  .describe(
    `A subscription (FHIR R4 Subscription, channel ${registeredChannels.map((channel) => channel.type).join(' or ')}): on a search criteria, or on a topic (Subscriptions R5 Backport IG)`,
  )
  .meta(
    example({
      resourceType: 'Subscription',
      status: 'requested',
      criteria: 'Appointment?status=booked&_include=Appointment:patient',
      reason: 'Booked appointments with their patients',
      contact: [{ system: 'email', value: 'ops@example.org' }],
      channel: { type: 'rest-hook', endpoint: 'https://receiver.example.org/hooks', payload: 'application/fhir+json', header: ['secret: s3cr3t-value'] },
    }),
  );

export const subscriptionReadEnvelope = z
  .object({ fullUrl: z.string(), resource: subscription, search: z.object({ mode: z.literal('match') }) })
  .describe("The spec's read envelope: neither a Bundle nor a bare resource");

/** The refusals every FHIR route may answer, besides its own. */
export const commonRefusals = {
  400: operationOutcome.describe('The request is not valid (the reason names what)'),
  401: operationOutcome.describe('No API key, or an unknown or revoked one'),
  403: operationOutcome.describe("The key's scopes do not cover this request"),
  429: operationOutcome.describe('More requests this minute than API_RATE_LIMIT_PER_MINUTE allows; see Retry-After'),
  503: operationOutcome.describe('The database is unreachable or a statement took too long; try again'),
};

const fhirMediaType = 'application/fhir+json';

/** The route options every FHIR route shares in the description: its tag, operationId and media types. */
export function fhirOperation(tag: 'Resources' | 'Search' | 'Subscriptions' | 'Bundles' | 'Server', operationId: string, withBody = false) {
  return { tags: [tag], operationId, produces: [fhirMediaType], ...(withBody ? { consumes: [fhirMediaType, 'application/json'] } : {}) };
}
