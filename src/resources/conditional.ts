import { sql } from 'kysely';
import { inTransaction, type Db } from '../db/database.ts';
import type { FhirResource } from '../db/schema.ts';
import { FhirError, badRequest } from '../fhir/outcome.ts';
import { parseSearchQuery } from '../search/query.ts';
import { searchResources } from '../search/search.ts';
import { patchResource, type PatchOperation } from './patch.ts';
import { createResource, deleteResource, readResource, updateResource, type WriteResult } from './store.ts';

/**
 * FHIR's conditional interactions: a write that names its target by a search
 * (`identifier=http://hospital|MRN-1`) rather than by an id, so that an
 * integration or a loader can send it again safely. Each answers as FHIR
 * says for none, one and several matches (412 for several). A condition is
 * evaluated and acted on in one transaction that holds an advisory lock on
 * the condition's text, so that two identical conditional creates sent at
 * once make one resource, not two. The write itself is an ordinary one: the
 * same triggers record its version and notify its subscriptions, in the same
 * transaction.
 */

/**
 * The condition of a conditional interaction, as its URL query or an
 * If-None-Exist header gives it (`identifier=…`; `Type?identifier=…` and
 * `?identifier=…` are read the same).
 */
export function conditionOf(type: string, text: string): string {
  const withoutType = text.startsWith(`${type}?`) ? text.slice(type.length + 1) : text;
  return withoutType.startsWith('?') ? withoutType.slice(1) : withoutType;
}

/** Create unless a resource matches (If-None-Exist): one match is returned as it is (`created` false), several are a 412. */
export async function conditionalCreate(db: Db, type: string, body: FhirResource, condition: string, id?: string): Promise<WriteResult> {
  return inTransaction(db, async (transaction) => {
    const matched = await selectedId(transaction, type, condition, 'create');
    if (matched !== undefined) return { ...(await readResource(transaction, type, matched)), created: false };
    return createResource(transaction, type, body, id);
  });
}

/**
 * Update the resource the condition selects (PUT Type?condition): none
 * creates (with the body's id if it has one, as update-as-create; else with
 * `idForCreate`, or a new id), one is updated (a body id must be its id),
 * several are a 412.
 */
export async function conditionalUpdate(db: Db, type: string, body: FhirResource, condition: string, idForCreate?: string): Promise<WriteResult> {
  return inTransaction(db, async (transaction) => {
    const matched = await selectedId(transaction, type, condition, 'update');
    if (matched === undefined) {
      return typeof body.id === 'string' ? updateResource(transaction, type, body.id, body) : createResource(transaction, type, body, idForCreate);
    }
    if (body.id !== undefined && body.id !== matched) {
      throw badRequest(`The body's id (${JSON.stringify(body.id)}) is not that of the ${type} the condition selects (${matched})`);
    }
    return updateResource(transaction, type, matched, { ...body, id: matched });
  });
}

/** Delete the resource the condition selects (DELETE Type?condition): none deletes nothing (a repeated delete succeeds), several are a 412. */
export async function conditionalDelete(db: Db, type: string, condition: string): Promise<{ versionId: number | undefined }> {
  return inTransaction(db, async (transaction) => {
    const matched = await selectedId(transaction, type, condition, 'delete');
    return matched === undefined ? { versionId: undefined } : deleteResource(transaction, type, matched);
  });
}

/** Patch the resource the condition selects (PATCH Type?condition): none is a 404, several are a 412. */
export async function conditionalPatch(db: Db, type: string, operations: PatchOperation[], condition: string): Promise<WriteResult> {
  return inTransaction(db, async (transaction) => {
    const matched = await selectedId(transaction, type, condition, 'patch');
    if (matched === undefined) throw new FhirError(404, 'not-found', `No ${type} matches ${condition}: nothing to patch`);
    return patchResource(transaction, type, matched, operations);
  });
}

/**
 * The id of the one current resource of `type` that `condition` selects, or
 * undefined when none does; several are a 412. Taken under a
 * transaction-scoped advisory lock on the type and condition: a second
 * writer with the same condition waits for this transaction, then sees what
 * it wrote. (Outside a transaction the lock ends with the statement.)
 */
export async function selectedId(db: Db, type: string, condition: string, interaction: string): Promise<string | undefined> {
  const query = parseSearchQuery(type, condition);
  const shapesResults =
    query.include.length + query.revinclude.length > 0 ||
    query.count !== undefined ||
    query.sort !== undefined ||
    query.total !== undefined ||
    query.pageToken !== undefined ||
    query.summary !== undefined ||
    query.elements !== undefined;
  if (shapesResults) throw badRequest(`The condition of a conditional ${interaction} takes search parameters only, not _include, _count, _sort and the like: '${condition}'`);
  if (query.filters.length + query.related.length === 0) {
    throw badRequest(`A conditional ${interaction} needs a condition (search parameters, such as identifier=system|value) that selects the ${type}`);
  }
  await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`${type}?${condition}`}, 0))`.execute(db);
  const { matches } = await searchResources(db, { ...query, count: 2 });
  if (matches.length > 1) {
    throw new FhirError(412, 'multiple-matches', `More than one ${type} matches ${condition}: the conditional ${interaction} must select one (narrow the condition)`);
  }
  return matches[0]?.id;
}
