import fastJsonPatch from 'fast-json-patch';
import { z } from 'zod';
import { inTransaction, type Db } from '../db/database.ts';
import type { FhirResource } from '../db/schema.ts';
import { FhirError, badRequest } from '../fhir/outcome.ts';
import { assertResourceBody, readResource, updateResource, type WriteResult } from './store.ts';

/**
 * FHIR's patch interaction with JSON Patch (RFC 6902,
 * application/json-patch+json), applied by fast-json-patch: the current
 * version is read under a row lock, patched, checked as any update body is,
 * and written as the next version (the same triggers, the same
 * notifications). A patch that cannot apply (a `test` that fails, a path
 * that is not there) is a 422 naming the operation; one that is not JSON
 * Patch at all is a 400.
 */

export const jsonPatchMediaType = 'application/json-patch+json';

const operationSchema = z.looseObject({
  op: z.enum(['add', 'remove', 'replace', 'move', 'copy', 'test'], { error: 'op must be add, remove, replace, move, copy or test' }),
  path: z.string({ error: 'path must be a JSON Pointer' }),
  from: z.string().optional(),
  value: z.unknown().optional(),
});

/** One operation of a JSON Patch, checked by operationSchema where it enters. */
export type PatchOperation = fastJsonPatch.Operation;

const patchSchema = z.array(operationSchema, { error: 'A JSON Patch is an array of operations' }).min(1, 'A JSON Patch with no operations changes nothing');

/** Checks a request body (or a Bundle entry's Binary, decoded) as a JSON Patch document. */
export function asJsonPatch(body: unknown): PatchOperation[] {
  const parsed = patchSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const where = issue.path.length === 0 ? '' : ` (operation ${String(issue.path[0])})`;
    throw badRequest(`${issue.message}${where}`, 'structure');
  }
  // The schema checked what fast-json-patch needs of each operation; it checks each again as it applies it.
  return parsed.data as PatchOperation[];
}

/**
 * The JSON Patch a Bundle entry carries: FHIR puts it in a Binary resource
 * whose contentType is application/json-patch+json and whose data is the
 * patch, base64-encoded.
 */
export function jsonPatchOfBinary(resource: unknown): PatchOperation[] {
  const binary = resource as { resourceType?: unknown; contentType?: unknown; data?: unknown } | undefined;
  if (binary?.resourceType !== 'Binary' || binary.contentType !== jsonPatchMediaType || typeof binary.data !== 'string') {
    throw badRequest(`A PATCH entry's resource is a Binary with contentType ${jsonPatchMediaType} and the patch, base64-encoded, in data`, 'structure');
  }
  let patch: unknown;
  try {
    patch = JSON.parse(Buffer.from(binary.data, 'base64').toString('utf8'));
  } catch {
    throw badRequest("A PATCH entry's Binary.data is not a base64-encoded JSON Patch", 'structure');
  }
  return asJsonPatch(patch);
}

/** Patches the current version of `type/id` (only version `ifMatch`, when given). */
export async function patchResource(db: Db, type: string, id: string, operations: PatchOperation[], ifMatch?: number): Promise<WriteResult> {
  return inTransaction(db, async (transaction) => {
    const locked = await transaction
      .selectFrom('fhir.resources')
      .select(['content', 'version_id'])
      .where('resource_type', '=', type)
      .where('id', '=', id)
      .forUpdate()
      .executeTakeFirst();
    if (locked === undefined) {
      // readResource says whether it never existed (404) or was deleted (410).
      await readResource(transaction, type, id);
      throw new FhirError(409, 'conflict', `${type}/${id} was created while it was being patched: send the patch again`);
    }
    const current = locked;
    if (ifMatch !== undefined && ifMatch !== current.version_id) {
      throw new FhirError(412, 'conflict', `If-Match names version ${ifMatch} of ${type}/${id}, but its current version is ${current.version_id}`);
    }
    const patched = applied(current.content, operations);
    if (patched?.resourceType !== type || patched.id !== id) {
      throw new FhirError(422, 'processing', `A patch may not change the resource's resourceType or id (${type}/${id})`);
    }
    assertResourceBody(type, patched, id);
    return updateResource(transaction, type, id, patched, current.version_id);
  });
}

/** The document `operations` make of `content`, or a 422 naming the operation that cannot apply (never echoing the resource). */
function applied(content: FhirResource, operations: PatchOperation[]): FhirResource {
  try {
    return fastJsonPatch.applyPatch(content, operations, true, false).newDocument;
  } catch (error) {
    if (error instanceof fastJsonPatch.JsonPatchError) {
      const operation = operations[error.index ?? 0];
      const reason = error.message.split('\n')[0];
      const status =
        error.name === 'TEST_OPERATION_FAILED' ||
        error.name.startsWith('OPERATION_PATH') ||
        error.name.startsWith('OPERATION_FROM') ||
        error.name === 'OPERATION_VALUE_OUT_OF_BOUNDS'
          ? 422
          : 400;
      throw new FhirError(
        status,
        status === 422 ? 'processing' : 'invalid',
        `JSON Patch operation ${error.index ?? 0} (${operation?.op} ${operation?.path}) cannot apply: ${reason}`,
      );
    }
    if (error instanceof TypeError) throw badRequest(`The JSON Patch cannot apply: ${error.message.split(',')[0]}`);
    throw error;
  }
}
