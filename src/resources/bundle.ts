import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import { z } from 'zod';
import type { Db } from '../db/database.ts';
import type { FhirResource } from '../db/schema.ts';
import { FhirError, badRequest, type OperationOutcome } from '../fhir/outcome.ts';
import type { Caller } from '../auth/api-keys.ts';
import { readSubscription, submitSubscription, subscriptionsAreImmutable, type SubscriptionContext } from '../subscriptions/store.ts';
import { conditionOf, conditionalCreate, conditionalDelete, conditionalPatch, conditionalUpdate, selectedId } from './conditional.ts';
import { jsonPatchOfBinary, patchResource } from './patch.ts';
import { isResourceType } from '../fhir/definitions.ts';
import {
  assertResourceBody,
  assertResourceId,
  assertResourceType,
  createResource,
  deleteResource,
  readResource,
  updateResource,
  type StoredVersion,
} from './store.ts';

/**
 * Transaction and batch Bundles (FHIR RESTful API, "batch/transaction").
 * A transaction runs its entries in array order in one database transaction;
 * a batch runs each entry on its own.
 */

const entrySchema = z.object({
  fullUrl: z.string().optional(),
  resource: z.unknown().optional(),
  request: z.object(
    {
      method: z.enum(['GET', 'POST', 'PUT', 'PATCH', 'DELETE'], { error: 'request.method must be GET, POST, PUT, PATCH or DELETE' }),
      url: z.string({ error: 'request.url is required' }).min(1, 'request.url is required'),
      ifMatch: z.string().optional(),
      ifNoneExist: z.string().optional(),
    },
    { error: 'request is required' },
  ),
});

const processableBundleSchema = z.looseObject({
  resourceType: z.literal('Bundle'),
  type: z.enum(['transaction', 'batch']),
  entry: z.array(z.unknown(), { error: 'Bundle.entry must be an array' }).default([]),
});

export type ProcessableBundle = z.infer<typeof processableBundleSchema>;

/** The Bundle as a transaction or batch to process, or undefined when it is a Bundle of another type (stored as is). */
export function asProcessableBundle(body: { type?: unknown }): ProcessableBundle | undefined {
  if (body.type !== 'transaction' && body.type !== 'batch') return undefined;
  const parsed = processableBundleSchema.safeParse(body);
  if (!parsed.success) throw badRequest(parsed.error.issues.map((issue) => issue.message).join('; '), 'structure');
  if (parsed.data.entry.length > maxBundleEntries) {
    throw new FhirError(
      413,
      'too-costly',
      `The ${parsed.data.type} Bundle has ${parsed.data.entry.length.toLocaleString('en')} entries; the limit is ${maxBundleEntries.toLocaleString('en')}: split it (a bulk load can write fhir.resources with SQL)`,
    );
  }
  return parsed.data;
}

/**
 * The most entries a transaction or batch may have: a transaction holds its
 * locks until its last entry (50,000 entries once held one for 7.5 minutes),
 * and its answer lists every entry.
 */
export const maxBundleEntries = 1000;
type Entry = z.infer<typeof entrySchema>;

type EntryResponse = {
  resource?: FhirResource;
  response: { status: string; location?: string; etag?: string; lastModified?: string; outcome?: OperationOutcome };
};

/** Where an entry's request.url points: `Type`, `Type/id` or `Type?condition`, relative or under our own base. */
type Target = { type: string; id?: string; condition?: string };

/** A `urn:uuid:` fullUrl of the Bundle and the resource it stands for. */
type UrnTarget = { urn: string; type: string; id: string };

export async function processBundle(
  db: Db,
  bundle: ProcessableBundle,
  serviceBase: string,
  subscriptions: SubscriptionContext,
  caller: Caller,
): Promise<FhirResource> {
  const contextIn = async (executor: Db): Promise<EntryContext> => {
    const urnTargets = await assignUrnIds(executor, bundle.entry);
    return { serviceBase, subscriptions, caller, urnTargets, rewriteReferences: referenceRewriter(urnTargets) };
  };

  if (bundle.type === 'transaction') {
    const responses = await db.transaction().execute(async (transaction) => {
      const context = await contextIn(transaction);
      const results: EntryResponse[] = [];
      for (const [index, raw] of bundle.entry.entries()) {
        try {
          results.push(await executeEntry(transaction, raw, index, context));
        } catch (error) {
          throw error instanceof FhirError ? nameEntry(error, index) : error;
        }
      }
      return results;
    });
    return responseBundle('transaction-response', responses);
  }

  const context = await contextIn(db);
  const responses: EntryResponse[] = [];
  for (const [index, raw] of bundle.entry.entries()) {
    try {
      responses.push(await executeEntry(db, raw, index, context));
    } catch (error) {
      if (!(error instanceof FhirError)) throw error;
      responses.push({ response: { status: statusLine(error.status), outcome: nameEntry(error, index).outcome } });
    }
  }
  return responseBundle('batch-response', responses);
}

/** A transaction's or batch's answer: an entry per request entry; none for a Bundle without entries (FHIR JSON has no empty arrays). */
function responseBundle(type: 'transaction-response' | 'batch-response', responses: EntryResponse[]): FhirResource {
  return { resourceType: 'Bundle', id: randomUUID(), type, ...(responses.length === 0 ? {} : { entry: responses }) };
}

/**
 * Gives each entry whose fullUrl is a `urn:uuid:` the id its resource will
 * have, up front, so that references to it anywhere in the Bundle can be
 * rewritten before the first write: a POST a new server id, a PUT its own; a
 * conditional create or update the id of the resource its condition selects
 * (looked up now, under the condition's lock in a transaction), or a new one
 * when none does. Keyed by entry index.
 */
async function assignUrnIds(db: Db, entries: unknown[]): Promise<Map<number, UrnTarget>> {
  const assigned = new Map<number, UrnTarget>();
  for (const [index, raw] of entries.entries()) {
    const parsed = entrySchema.safeParse(raw);
    if (!parsed.success || !parsed.data.fullUrl?.startsWith('urn:uuid:')) continue;
    const { request, fullUrl, resource } = parsed.data;
    const target = parseTarget(request.url);
    // Subscriptions are not resources others refer to, and get their ids from their own table.
    if (!target || target.type === 'Subscription' || !isResourceType(target.type)) continue;
    const conditional = request.method === 'POST' ? request.ifNoneExist : request.method === 'PUT' ? target.condition : undefined;
    let matched: string | undefined;
    try {
      matched =
        conditional === undefined
          ? undefined
          : await selectedId(db, target.type, conditionOf(target.type, conditional), request.method === 'POST' ? 'create' : 'update');
    } catch (error) {
      // The entry fails when it runs, with its own answer (in a batch, alone).
      if (error instanceof FhirError) continue;
      throw error;
    }
    const bodyId = (resource as { id?: unknown } | undefined)?.id;
    if (request.method === 'POST') {
      assigned.set(index, { urn: fullUrl, type: target.type, id: matched ?? randomUUID() });
    } else if (request.method === 'PUT' && target.condition !== undefined) {
      assigned.set(index, { urn: fullUrl, type: target.type, id: matched ?? (typeof bodyId === 'string' ? bodyId : randomUUID()) });
    } else if (request.method === 'PUT' && target.id) {
      assigned.set(index, { urn: fullUrl, type: target.type, id: target.id });
    }
  }
  return assigned;
}

/** Rewrites every `reference` equal to one of the Bundle's urn:uuid fullUrls into `Type/id`. */
function referenceRewriter(urnTargets: Map<number, UrnTarget>): (value: unknown) => unknown {
  const byUrn = new Map([...urnTargets.values()].map((target) => [target.urn, `${target.type}/${target.id}`]));
  const rewrite = (value: unknown): unknown => {
    if (byUrn.size === 0 || typeof value !== 'object' || value === null) return value;
    if (Array.isArray(value)) return value.map(rewrite);
    return Object.fromEntries(
      Object.entries(value).map(([key, inner]) =>
        key === 'reference' && typeof inner === 'string' && byUrn.has(inner) ? [key, byUrn.get(inner)] : [key, rewrite(inner)],
      ),
    );
  };
  return rewrite;
}

type EntryContext = {
  serviceBase: string;
  subscriptions: SubscriptionContext;
  /** Who sent the Bundle: whose subscriptions its entries may read and switch off. */
  caller: Caller;
  urnTargets: Map<number, UrnTarget>;
  rewriteReferences: (value: unknown) => unknown;
};

async function executeEntry(db: Db, raw: unknown, index: number, context: EntryContext): Promise<EntryResponse> {
  const { serviceBase, urnTargets, rewriteReferences } = context;
  const parsed = parseEntry(raw);
  const entry = { ...parsed, resource: rewriteReferences(parsed.resource) };
  const target = parseTarget(entry.request.url);
  if (!target) throw badRequest(`request.url '${entry.request.url}' is not of the form Type, Type/id or Type?condition`, 'not-supported');
  if (target.type === 'Subscription') return executeSubscriptionEntry(db, entry, target, context);
  assertResourceType(target.type);
  if (target.id !== undefined) assertResourceId(target.id);
  const ifMatch = entry.request.ifMatch === undefined ? undefined : parseIfMatch(entry.request.ifMatch);
  const urnId = urnTargets.get(index)?.id;

  if (target.condition !== undefined)
    return executeConditionalEntry(db, entry, { ...target, condition: target.condition }, { ifMatch, urnId, index }, serviceBase);
  switch (entry.request.method) {
    case 'POST': {
      if (target.id !== undefined) throw badRequest(`POST request.url must be a type, not '${entry.request.url}'`);
      assertResourceBody(target.type, entry.resource);
      const ifNoneExist = entry.request.ifNoneExist;
      if (ifNoneExist === undefined) return written(await createResource(db, target.type, entry.resource, urnId), '201 Created', serviceBase);
      const result = await conditionalCreate(db, target.type, entry.resource, conditionOf(target.type, ifNoneExist), urnId);
      return written(resolvedAsAssigned(result, urnId, index), result.created ? '201 Created' : '200 OK', serviceBase);
    }
    case 'PUT': {
      const id = requireId(target, entry);
      assertResourceBody(target.type, entry.resource, id);
      const result = await updateResource(db, target.type, id, entry.resource, ifMatch);
      return written(result, result.created ? '201 Created' : '200 OK', serviceBase);
    }
    case 'PATCH': {
      const id = requireId(target, entry);
      return written(await patchResource(db, target.type, id, jsonPatchOfBinary(entry.resource), ifMatch), '200 OK', serviceBase);
    }
    case 'DELETE': {
      const id = requireId(target, entry);
      const { versionId } = await deleteResource(db, target.type, id, ifMatch);
      return deletedResponse(versionId);
    }
    case 'GET': {
      const id = requireId(target, entry);
      return written(await readResource(db, target.type, id), '200 OK', serviceBase);
    }
  }
}

/** An entry whose request.url is `Type?condition`: a conditional update, delete or patch. */
async function executeConditionalEntry(
  db: Db,
  entry: Entry,
  { type, condition }: Target & { condition: string },
  { ifMatch, urnId, index }: { ifMatch: number | undefined; urnId: string | undefined; index: number },
  serviceBase: string,
): Promise<EntryResponse> {
  switch (entry.request.method) {
    case 'PUT': {
      assertResourceBody(type, entry.resource);
      const result = await conditionalUpdate(db, type, entry.resource, condition, { ifMatch, idForCreate: urnId });
      return written(resolvedAsAssigned(result, urnId, index), result.created ? '201 Created' : '200 OK', serviceBase);
    }
    case 'DELETE':
      return deletedResponse((await conditionalDelete(db, type, condition, ifMatch)).versionId);
    case 'PATCH':
      return written(await conditionalPatch(db, type, jsonPatchOfBinary(entry.resource), condition, ifMatch), '200 OK', serviceBase);
    default:
      throw badRequest(
        `${entry.request.method} '${entry.request.url}': a condition in request.url is for PUT, PATCH and DELETE (a conditional create sends ifNoneExist; searches in a Bundle are not supported)`,
        'not-supported',
      );
  }
}

/**
 * A conditional entry with a urn:uuid fullUrl, as written: its references
 * were rewritten to the id its condition selected before the Bundle ran
 * (assignUrnIds). An earlier entry of the same Bundle that wrote what the
 * condition selects changes that, and the references would point nowhere:
 * refused, so that a transaction writes nothing of it.
 */
function resolvedAsAssigned<T extends StoredVersion>(result: T, urnId: string | undefined, index: number): T {
  if (urnId !== undefined && result.resource.id !== urnId) {
    throw new FhirError(
      409,
      'conflict',
      `The condition of entry ${index} selects ${result.resource.resourceType}/${result.resource.id}, which an earlier entry of this Bundle wrote: references to its fullUrl cannot be resolved before the Bundle runs (make the earlier entry conditional too, or split the Bundle)`,
    );
  }
  return result;
}

function deletedResponse(versionId: number | undefined): EntryResponse {
  return { response: { status: '204 No Content', ...(versionId === undefined ? {} : { etag: `W/"${versionId}"` }) } };
}

/** Subscription entries: POST creates or switches off (in the Bundle's transaction, in array order), GET reads. */
async function executeSubscriptionEntry(db: Db, entry: Entry, target: Target, { serviceBase, subscriptions, caller }: EntryContext): Promise<EntryResponse> {
  if (entry.request.method === 'POST' && target.id === undefined) {
    const { created, resource } = await submitSubscription(db, subscriptions, entry.resource, caller);
    return subscriptionResponse(resource, created ? '201 Created' : '200 OK', serviceBase);
  }
  if (entry.request.method === 'GET' && target.id !== undefined) {
    return subscriptionResponse(await readSubscription(db, subscriptions, target.id, caller), '200 OK', serviceBase);
  }
  throw new FhirError(405, 'not-supported', subscriptionsAreImmutable);
}

function subscriptionResponse(resource: FhirResource, status: string, serviceBase: string): EntryResponse {
  const meta = resource.meta as { versionId: string; lastUpdated: string };
  return {
    resource,
    response: { status, location: `${serviceBase}/Subscription/${resource.id}`, etag: `W/"${meta.versionId}"`, lastModified: meta.lastUpdated },
  };
}

function parseEntry(raw: unknown): Entry {
  const parsed = entrySchema.safeParse(raw);
  if (!parsed.success) throw badRequest(parsed.error.issues.map((issue) => issue.message).join('; '), 'required');
  return parsed.data;
}

function parseTarget(url: string): Target | undefined {
  const relative = url.replace(/^https?:\/\/[^/]+\/fhir\/resources\//, '').replace(/^\/?fhir\/resources\//, '');
  const match = /^([A-Za-z]+)(?:\/([^/?#]+)|\?([^#]+))?$/.exec(relative);
  if (!match?.[1]) return undefined;
  return { type: match[1], ...(match[2] === undefined ? {} : { id: match[2] }), ...(match[3] === undefined ? {} : { condition: match[3] }) };
}

function requireId(target: Target, entry: Entry): string {
  if (target.id === undefined) throw badRequest(`${entry.request.method} request.url must be Type/id, not '${entry.request.url}'`);
  return target.id;
}

/** Parses an ETag-style version (`W/"3"`, `"3"` or `3`) as sent in If-Match. */
export function parseIfMatch(value: string): number {
  const match = /^(?:W\/)?"?(\d+)"?$/.exec(value.trim());
  if (!match?.[1]) throw badRequest(`If-Match must be a version ETag such as W/"3", not '${value}'`);
  return Number(match[1]);
}

function written(version: StoredVersion, status: string, serviceBase: string): EntryResponse {
  const { resource, versionId, lastUpdated } = version;
  return {
    resource,
    response: {
      status,
      location: `${serviceBase}/${resource.resourceType}/${resource.id}/_history/${versionId}`,
      etag: `W/"${versionId}"`,
      lastModified: lastUpdated,
    },
  };
}

function nameEntry(error: FhirError, index: number): FhirError {
  return new FhirError(error.status, error.outcome.issue[0]?.code ?? 'processing', `Bundle.entry[${index}]: ${error.message}`);
}

/** A batch entry's response.status: the code and Node's reason phrase for it ('412 Precondition Failed'). */
function statusLine(status: number): string {
  return `${status} ${STATUS_CODES[status] ?? ''}`.trim();
}
