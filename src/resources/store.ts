import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import pg from 'pg';
import type { Db } from '../db/database.ts';
import type { FhirResource } from '../db/schema.ts';
import { fhirIdPattern, isResourceType } from '../fhir/definitions.ts';
import { FhirError, badRequest, notFound } from '../fhir/outcome.ts';

/**
 * The FHIR resource store: create, read, update, delete and history over
 * fhir.resources. Versions, lastUpdated and history rows are the database's
 * work (see db/migrations); these functions only choose the statement and
 * turn "no row" into the right FHIR answer. Every function takes a Kysely
 * instance or transaction, so a Bundle can run several in one transaction.
 */

export type StoredVersion = {
  resource: FhirResource;
  versionId: number;
  /** meta.lastUpdated as the database wrote it (microseconds, UTC). */
  lastUpdated: string;
};

export type WriteResult = StoredVersion & { created: boolean };

/** Checks a resource type taken from a URL: an R4 type that this store holds. */
export function assertResourceType(type: string): void {
  if (!isResourceType(type)) throw notFound(`Unknown resource type '${type}': not a FHIR R4 resource type`);
  if (type === 'Subscription') {
    throw new FhirError(405, 'not-supported', 'Subscriptions live at /Subscription only: POST to create or switch off, GET to search or read');
  }
}

/** Checks a logical id taken from a URL. */
export function assertResourceId(id: string): void {
  // Quoted as JSON: an id may hold what an OperationOutcome's text cannot (a NUL, control characters).
  if (!fhirIdPattern.test(id)) throw badRequest(`Invalid resource id ${JSON.stringify(id)}: FHIR ids are 1-64 characters of A-Z, a-z, 0-9, '-' and '.'`);
}

/** Checks that a body is a resource of `type`; for an update, that its id is the URL's. */
export function assertResourceBody(type: string, body: unknown, urlId?: string): asserts body is FhirResource {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw badRequest('The body must be a FHIR resource (a JSON object)', 'structure');
  const resource = body as Record<string, unknown>;
  if (resource.resourceType !== type) {
    throw badRequest(`The body's resourceType (${JSON.stringify(resource.resourceType ?? null)}) does not match the URL's type '${type}'`);
  }
  if (resource.meta !== undefined && (typeof resource.meta !== 'object' || resource.meta === null || Array.isArray(resource.meta))) {
    throw badRequest('meta must be a JSON object', 'structure');
  }
  if (urlId !== undefined) {
    if (resource.id === undefined) throw badRequest(`The body has no id; an update of ${type}/${urlId} must carry id '${urlId}'`, 'required');
    if (resource.id !== urlId) throw badRequest(`The body's id (${JSON.stringify(resource.id)}) does not match the URL's id '${urlId}'`);
  }
}

/**
 * Valid JSON that jsonb cannot hold (a \u0000 in a string) fails with SQLSTATE
 * class 22, data exception: the client must change the resource, so it is a 400.
 */
function unstorableAsBadRequest(error: unknown): never {
  if (error instanceof pg.DatabaseError && error.code?.startsWith('22')) throw badRequest(`The resource cannot be stored: ${error.message}`);
  throw error;
}

/** jsonb orders keys by length; FHIR JSON reads best with resourceType, id and meta first. */
export function inFhirOrder(content: FhirResource): FhirResource {
  const { resourceType, id, meta, ...rest } = content;
  return { resourceType, id, meta, ...rest };
}

function toVersion(content: FhirResource): StoredVersion {
  const meta = content.meta as { versionId: string; lastUpdated: string };
  return { resource: inFhirOrder(content), versionId: Number(meta.versionId), lastUpdated: meta.lastUpdated };
}

/** Creates a resource with a server-assigned UUID; any id in the body is ignored, as FHIR create requires. */
export async function createResource(db: Db, type: string, body: FhirResource, id: string = randomUUID()): Promise<WriteResult> {
  const { content } = await db
    .insertInto('fhir.resources')
    .values({ resource_type: type, id, content: { ...body, id } })
    .returning('content')
    .executeTakeFirstOrThrow()
    .catch(unstorableAsBadRequest);
  return { ...toVersion(content), created: true };
}

export async function readResource(db: Db, type: string, id: string): Promise<StoredVersion> {
  const row = await db.selectFrom('fhir.resources').select('content').where('resource_type', '=', type).where('id', '=', id).executeTakeFirst();
  if (row) return toVersion(row.content);
  throw (await wasDeleted(db, type, id)) ? gone(type, id) : unknownResource(type, id);
}

/**
 * Updates a resource, or creates it with the given id when it does not exist
 * (FHIR update-as-create). With `ifMatch`, only the version it names is replaced.
 */
export async function updateResource(db: Db, type: string, id: string, body: FhirResource, ifMatch?: number): Promise<WriteResult> {
  if (ifMatch === undefined) {
    const row = await db
      .insertInto('fhir.resources')
      .values({ resource_type: type, id, content: body })
      .onConflict((conflict) => conflict.columns(['resource_type', 'id']).doUpdateSet({ content: (eb) => eb.ref('excluded.content') }))
      // xmax is 0 only on a row version that no UPDATE produced: the insert branch.
      .returning(['content', sql<boolean>`xmax = 0`.as('created')])
      .executeTakeFirstOrThrow()
      .catch(unstorableAsBadRequest);
    return { ...toVersion(row.content), created: row.created };
  }
  const row = await db
    .updateTable('fhir.resources')
    .set({ content: body })
    .where('resource_type', '=', type)
    .where('id', '=', id)
    .where('version_id', '=', ifMatch)
    .returning('content')
    .executeTakeFirst()
    .catch(unstorableAsBadRequest);
  if (row) return { ...toVersion(row.content), created: false };
  throw await versionConflict(db, type, id, ifMatch);
}

/**
 * Deletes a resource. Deleting one that is already deleted is a success that
 * writes nothing; deleting one that never existed is a 404.
 */
export async function deleteResource(db: Db, type: string, id: string, ifMatch?: number): Promise<{ versionId: number | undefined }> {
  let query = db.deleteFrom('fhir.resources').where('resource_type', '=', type).where('id', '=', id);
  if (ifMatch !== undefined) query = query.where('version_id', '=', ifMatch);
  const row = await query.returning('version_id').executeTakeFirst();
  if (row) return { versionId: row.version_id + 1 };
  if (ifMatch !== undefined) throw await versionConflict(db, type, id, ifMatch);
  if (await wasDeleted(db, type, id)) return { versionId: undefined };
  throw unknownResource(type, id);
}

export async function readVersion(db: Db, type: string, id: string, versionId: number): Promise<StoredVersion> {
  const row = await db
    .selectFrom('fhir.resource_history')
    .select(['content', 'is_deletion'])
    .where('resource_type', '=', type)
    .where('id', '=', id)
    .where('version_id', '=', versionId)
    .executeTakeFirst();
  if (!row) throw notFound(`${type}/${id} has no version ${versionId}`);
  if (row.is_deletion) throw new FhirError(410, 'deleted', `Version ${versionId} of ${type}/${id} is its deletion`);
  return toVersion(row.content);
}

async function wasDeleted(db: Db, type: string, id: string): Promise<boolean> {
  const row = await db
    .selectFrom('fhir.resource_history')
    .select('is_deletion')
    .where('resource_type', '=', type)
    .where('id', '=', id)
    .orderBy('version_id', 'desc')
    .limit(1)
    .executeTakeFirst();
  return row?.is_deletion === true;
}

async function versionConflict(db: Db, type: string, id: string, ifMatch: number): Promise<FhirError> {
  const current = await db.selectFrom('fhir.resources').select('version_id').where('resource_type', '=', type).where('id', '=', id).executeTakeFirst();
  const state = current ? `its current version is ${current.version_id}` : 'it does not exist';
  return new FhirError(412, 'conflict', `If-Match names version ${ifMatch} of ${type}/${id}, but ${state}`);
}

function unknownResource(type: string, id: string): FhirError {
  return notFound(`${type}/${id} is not known`);
}

function gone(type: string, id: string): FhirError {
  return new FhirError(410, 'deleted', `${type}/${id} has been deleted`);
}
