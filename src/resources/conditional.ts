import { sql } from 'kysely';
import { inTransaction, type Db } from '../db/database.ts';
import type { FhirResource } from '../db/schema.ts';
import { FhirError, badRequest } from '../fhir/outcome.ts';
import { parseSearchQuery, splitQuery } from '../search/query.ts';
import { matchingIds } from '../search/search.ts';
import { patchResource, type PatchOperation } from './patch.ts';
import { assertResourceId, createResource, deleteResource, readResource, updateResource, type WriteResult } from './store.ts';

/**
 * FHIR's conditional interactions: a write that names its target by a search
 * (`identifier=http://hospital|MRN-1`) rather than by an id, so that an
 * integration or a loader can send it again safely. Each answers as FHIR
 * says for none, one and several matches (412 for several). A condition is
 * evaluated and acted on in one transaction that holds an advisory lock on
 * the condition's parameters (selectedId), so that two identical conditional
 * creates sent at once make one resource, not two. The write itself is an ordinary one: the
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
 * Update the resource the condition selects (PUT Type?condition): one is
 * updated (a body id must be its id; If-Match, when given, must name its
 * current version); none creates, with the body's id if it has one and no
 * other resource has it (else 409: the condition did not select it), else
 * with `idForCreate` or a new id; several are a 412.
 */
export async function conditionalUpdate(
  db: Db,
  type: string,
  body: FhirResource,
  condition: string,
  options: { ifMatch?: number; idForCreate?: string } = {},
): Promise<WriteResult> {
  return inTransaction(db, async (transaction) => {
    const matched = await selectedId(transaction, type, condition, 'update');
    if (matched !== undefined) {
      if (body.id !== undefined && body.id !== matched) {
        throw badRequest(`The body's id (${JSON.stringify(body.id)}) is not that of the ${type} the condition selects (${matched})`);
      }
      return updateResource(transaction, type, matched, { ...body, id: matched }, options.ifMatch);
    }
    if (options.ifMatch !== undefined) throw new FhirError(412, 'conflict', `If-Match names version ${options.ifMatch}, but no ${type} matches ${condition}`);
    if (typeof body.id !== 'string') return createResource(transaction, type, body, options.idForCreate);
    assertResourceId(body.id);
    if (await everExisted(transaction, type, body.id)) {
      throw new FhirError(
        409,
        'conflict',
        `No ${type} matches ${condition}, but ${type}/${body.id} exists: a conditional update does not write a resource its condition did not select`,
      );
    }
    return createResource(transaction, type, body, body.id);
  });
}

/** Delete the resource the condition selects (DELETE Type?condition): none deletes nothing (a repeated delete succeeds), several are a 412. */
export async function conditionalDelete(db: Db, type: string, condition: string, ifMatch?: number): Promise<{ versionId: number | undefined }> {
  return inTransaction(db, async (transaction) => {
    const matched = await selectedId(transaction, type, condition, 'delete');
    if (matched === undefined && ifMatch !== undefined)
      throw new FhirError(412, 'conflict', `If-Match names version ${ifMatch}, but no ${type} matches ${condition}`);
    return matched === undefined ? { versionId: undefined } : deleteResource(transaction, type, matched, ifMatch);
  });
}

/** Patch the resource the condition selects (PATCH Type?condition): none is a 404, several are a 412. */
export async function conditionalPatch(db: Db, type: string, operations: PatchOperation[], condition: string, ifMatch?: number): Promise<WriteResult> {
  return inTransaction(db, async (transaction) => {
    const matched = await selectedId(transaction, type, condition, 'patch');
    if (matched === undefined) throw new FhirError(404, 'not-found', `No ${type} matches ${condition}: nothing to patch`);
    return patchResource(transaction, type, matched, operations, ifMatch);
  });
}

/** How many advisory locks one type's conditions share: a transaction of many conditional entries holds at most this many a type. */
const conditionLockBuckets = 64;

/**
 * The id of the one current resource of `type` that `condition` selects, or
 * undefined when none does; several are a 412. Taken under a
 * transaction-scoped advisory lock on the type and the condition's
 * parameters (decoded and sorted: `identifier=s|v` and `identifier=s%7Cv`
 * are one condition), so that a second writer with the same condition waits
 * for this transaction, then sees what it wrote. The locks are
 * conditionLockBuckets a type: two different conditions may share one and
 * wait for each other, briefly. (Outside a transaction the lock ends with
 * the statement.)
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
  if (shapesResults)
    throw badRequest(`The condition of a conditional ${interaction} takes search parameters only, not _include, _count, _sort and the like: '${condition}'`);
  if (query.filters.length + query.related.length === 0) {
    throw badRequest(`A conditional ${interaction} needs a condition (search parameters, such as identifier=system|value) that selects the ${type}`);
  }
  const parameters = JSON.stringify(
    splitQuery(condition)
      .map(([name, value]) => `${name}=${value}`)
      .sort(),
  );
  await sql`SELECT pg_advisory_xact_lock(hashtext(${`conditional ${type}`}), hashtext(${parameters}) & ${conditionLockBuckets - 1})`.execute(db);
  const matches = await matchingIds(db, query, 2);
  if (matches.length > 1) {
    throw new FhirError(
      412,
      'multiple-matches',
      `More than one ${type} matches ${condition}: the conditional ${interaction} must select one (narrow the condition)`,
    );
  }
  return matches[0];
}

/** Whether `type/id` has a version, live or deleted. */
async function everExisted(db: Db, type: string, id: string): Promise<boolean> {
  const row = await db
    .selectFrom('fhir.resource_history')
    .select('version_id')
    .where('resource_type', '=', type)
    .where('id', '=', id)
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
}
