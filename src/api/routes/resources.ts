import { randomUUID } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Db } from '../../db/database.ts';
import { FhirError, badRequest } from '../../fhir/outcome.ts';
import { parseIfMatch } from '../../resources/bundle.ts';
import { conditionOf, conditionalCreate, conditionalDelete, conditionalPatch, conditionalUpdate } from '../../resources/conditional.ts';
import { defaultHistoryCount, maxHistoryCount, parseHistoryQuery, readHistoryPage, type HistoryPage, type HistoryScope } from '../../resources/history.ts';
import { asJsonPatch, jsonPatchMediaType, patchResource } from '../../resources/patch.ts';
import {
  assertResourceBody,
  assertResourceId,
  assertResourceType,
  createResource,
  deleteResource,
  readResource,
  readVersion,
  updateResource,
} from '../../resources/store.ts';
import { fhirJson } from '../errors.ts';
import { bundle, commonRefusals, fhirOperation, operationOutcome, resource } from '../schemas.ts';
import { sendVersion } from '../fhir-reply.ts';
import { linkWithPageToken, pairsWithoutPageToken, rawQueryOf } from '../raw-query.ts';

export type ResourceRoutesOptions = { db: Db; serviceBase: string };

const typeParams = z.object({ type: z.string().describe('An R4 resource type, e.g. Patient') });
const instanceParams = typeParams.extend({ id: z.string().describe('The logical id') });
const versionParams = instanceParams.extend({ vid: z.string().describe('A versionId') });
const resourceBody = z.looseObject({ resourceType: z.string() }).describe('A FHIR resource');
const unknownType = operationOutcome.describe('Not an R4 resource type');
const notKnown = operationOutcome.describe('No such resource (or type)');
const tooLarge = operationOutcome.describe('The body is over 10 MiB');
const ifMatchHeaders = z.object({ 'if-match': z.string().optional().describe('W/"<versionId>": write only if this is the current version') });
const createHeaders = z.object({
  'if-none-exist': z
    .string()
    .optional()
    .describe('Conditional create: search parameters (identifier=system|value); when one resource matches, it is returned and nothing is created'),
});
const conditionQuery = z.looseObject({}).describe('The condition: search parameters that select one resource (identifier=system|value)');
const severalMatch = operationOutcome.describe('The condition selects more than one resource (multiple-matches)');
// Checked by jsonPatchOf in the handler, its media type first (a FHIRPath Patch is a 415, not a 400 about array items): described here.
const jsonPatch = z
  .unknown()
  .describe('A JSON Patch (RFC 6902): an array of operations (add, remove, replace, move, copy, test), sent as application/json-patch+json')
  .meta({
    example: [
      { op: 'test', path: '/active', value: true },
      { op: 'replace', path: '/active', value: false },
    ],
  });
const unprocessable = operationOutcome.describe('The patch cannot apply: a test operation failed, or a path is not in the resource');
const historyQuery = z.looseObject({
  _since: z.string().optional().describe('Only versions written at or after this instant (2026-01-02T03:04:05Z)'),
  _count: z
    .string()
    .optional()
    .describe(`Versions per page, 1-${maxHistoryCount.toLocaleString('en')} (default ${defaultHistoryCount})`),
  _page_token: z.string().optional().describe("The next or previous link's token"),
});

/** FHIR RESTful create, read, update, delete, history and vread for every R4 resource type. */
export const resourceRoutes: FastifyPluginAsyncZod<ResourceRoutesOptions> = async (app, { db, serviceBase }) => {
  const checkInstance = (type: string, id: string) => {
    assertResourceType(type);
    assertResourceId(id);
  };

  app.post(
    '/:type',
    {
      schema: {
        summary: 'Create a resource (the server assigns its id)',
        ...fhirOperation('Resources', 'createResource', true),
        params: typeParams,
        headers: createHeaders,
        body: resourceBody,
        response: {
          201: resource.describe('Created: the resource as stored, with id and meta; Location, ETag and Last-Modified headers'),
          200: resource.describe('If-None-Exist matched one resource: that resource, and nothing created'),
          ...commonRefusals,
          404: unknownType,
          412: severalMatch,
          413: tooLarge,
        },
      },
    },
    async (request, reply) => {
      const { type } = request.params;
      assertResourceType(type);
      assertResourceBody(type, request.body);
      const ifNoneExist = request.headers['if-none-exist'];
      const result =
        ifNoneExist === undefined
          ? await createResource(db, type, request.body)
          : await conditionalCreate(db, type, request.body, conditionOf(type, ifNoneExist));
      return sendVersion(reply, result.created ? 201 : 200, result, { serviceBase, location: true });
    },
  );

  app.put(
    '/:type',
    {
      schema: {
        summary: 'Conditional update: update the one resource the search parameters select, or create it when none does',
        ...fhirOperation('Resources', 'conditionalUpdate', true),
        params: typeParams,
        querystring: conditionQuery,
        headers: ifMatchHeaders,
        body: resourceBody,
        response: {
          200: resource.describe('Updated: the new version'),
          201: resource.describe('Created: nothing matched'),
          ...commonRefusals,
          404: unknownType,
          409: operationOutcome.describe("Nothing matched, and the body's id is another resource's: not overwritten"),
          412: operationOutcome.describe(
            'The condition selects more than one resource (multiple-matches), or If-Match names a version that is not the current one',
          ),
          413: tooLarge,
        },
      },
    },
    async (request, reply) => {
      const { type } = request.params;
      assertResourceType(type);
      assertResourceBody(type, request.body);
      const result = await conditionalUpdate(db, type, request.body, requiredCondition(request.url, `PUT ${type}`), {
        ifMatch: optionalIfMatch(request.headers['if-match']),
      });
      return sendVersion(reply, result.created ? 201 : 200, result, { serviceBase, location: true });
    },
  );

  app.delete(
    '/:type',
    {
      schema: {
        summary: 'Conditional delete: delete the one resource the search parameters select',
        ...fhirOperation('Resources', 'conditionalDelete'),
        params: typeParams,
        querystring: conditionQuery,
        headers: ifMatchHeaders,
        response: {
          204: z.undefined().describe("Deleted (ETag names the deletion's version), or nothing matched (no ETag)"),
          ...commonRefusals,
          404: unknownType,
          412: severalMatch,
        },
      },
    },
    async (request, reply) => {
      const { type } = request.params;
      assertResourceType(type);
      const { versionId } = await conditionalDelete(db, type, requiredCondition(request.url, `DELETE ${type}`), optionalIfMatch(request.headers['if-match']));
      return sendDeletion(reply, versionId);
    },
  );

  app.patch(
    '/:type/:id',
    {
      schema: {
        summary: 'Patch a resource with a JSON Patch',
        ...fhirOperation('Resources', 'patchResource', true),
        consumes: [jsonPatchMediaType],
        params: instanceParams,
        headers: ifMatchHeaders,
        body: jsonPatch,
        response: {
          200: resource.describe('Patched: the new version'),
          ...commonRefusals,
          404: notKnown,
          410: operationOutcome.describe('Deleted'),
          412: operationOutcome.describe('If-Match names a version that is not the current one'),
          415: operationOutcome.describe('Not a JSON Patch (FHIRPath Patch is not supported)'),
          422: unprocessable,
        },
      },
    },
    async (request, reply) => {
      const { type, id } = request.params;
      checkInstance(type, id);
      const operations = jsonPatchOf(request.headers['content-type'], request.body);
      return sendVersion(reply, 200, await patchResource(db, type, id, operations, optionalIfMatch(request.headers['if-match'])), {
        serviceBase,
        location: true,
      });
    },
  );

  app.patch(
    '/:type',
    {
      schema: {
        summary: 'Conditional patch: patch the one resource the search parameters select',
        ...fhirOperation('Resources', 'conditionalPatch', true),
        consumes: [jsonPatchMediaType],
        params: typeParams,
        querystring: conditionQuery,
        headers: ifMatchHeaders,
        body: jsonPatch,
        response: {
          200: resource.describe('Patched: the new version'),
          ...commonRefusals,
          404: notKnown,
          412: severalMatch,
          415: operationOutcome.describe('Not a JSON Patch'),
          422: unprocessable,
        },
      },
    },
    async (request, reply) => {
      const { type } = request.params;
      assertResourceType(type);
      const operations = jsonPatchOf(request.headers['content-type'], request.body);
      const patched = await conditionalPatch(
        db,
        type,
        operations,
        requiredCondition(request.url, `PATCH ${type}`),
        optionalIfMatch(request.headers['if-match']),
      );
      return sendVersion(reply, 200, patched, { serviceBase, location: true });
    },
  );

  app.get(
    '/:type/:id',
    {
      schema: {
        summary: 'Read a resource (its current version)',
        ...fhirOperation('Resources', 'readResource'),
        params: instanceParams,
        response: {
          200: resource.describe('The current version; ETag and Last-Modified headers'),
          ...commonRefusals,
          404: notKnown,
          410: operationOutcome.describe('Deleted'),
        },
      },
    },
    async (request, reply) => {
      const { type, id } = request.params;
      checkInstance(type, id);
      return sendVersion(reply, 200, await readResource(db, type, id), { serviceBase });
    },
  );

  app.put(
    '/:type/:id',
    {
      schema: {
        summary: 'Update a resource, or create it with this id',
        ...fhirOperation('Resources', 'updateResource', true),
        params: instanceParams,
        headers: ifMatchHeaders,
        body: resourceBody,
        response: {
          200: resource.describe('Updated: the new version'),
          201: resource.describe('Created with the id of the URL'),
          ...commonRefusals,
          404: unknownType,
          412: operationOutcome.describe('If-Match names a version that is not the current one'),
          413: tooLarge,
        },
      },
    },
    async (request, reply) => {
      const { type, id } = request.params;
      checkInstance(type, id);
      assertResourceBody(type, request.body, id);
      const ifMatch = optionalIfMatch(request.headers['if-match']);
      const result = await updateResource(db, type, id, request.body, ifMatch);
      return sendVersion(reply, result.created ? 201 : 200, result, { serviceBase, location: true });
    },
  );

  app.delete(
    '/:type/:id',
    {
      schema: {
        summary: 'Delete a resource (idempotent)',
        ...fhirOperation('Resources', 'deleteResource'),
        params: instanceParams,
        headers: ifMatchHeaders,
        response: {
          204: z.undefined().describe("Deleted (or already deleted); ETag names the deletion's version"),
          ...commonRefusals,
          404: notKnown,
          412: operationOutcome.describe('If-Match names a version that is not the current one'),
        },
      },
    },
    async (request, reply) => {
      const { type, id } = request.params;
      checkInstance(type, id);
      const { versionId } = await deleteResource(db, type, id, optionalIfMatch(request.headers['if-match']));
      return sendDeletion(reply, versionId);
    },
  );

  /** A page of the history of `scope` (a resource, a type, or everything) as a history Bundle. */
  const history = async (scope: HistoryScope, request: FastifyRequest, reply: FastifyReply) => {
    const rawQuery = rawQueryOf(request.url);
    const page = await readHistoryPage(db, scope, parseHistoryQuery(rawQuery));
    return reply.type(fhirJson).send(historyBundle(page, historyUrl(serviceBase, scope), rawQuery, serviceBase));
  };
  const historyResponses = {
    200: bundle.describe('A history Bundle, newest first; deletions are entries without a resource; next and previous links'),
    ...commonRefusals,
  };

  app.get(
    '/_history',
    {
      schema: {
        summary: 'History of every resource (system history), newest version first',
        ...fhirOperation('Resources', 'readSystemHistory'),
        querystring: historyQuery,
        response: historyResponses,
      },
    },
    async (request, reply) => history({}, request, reply),
  );

  app.get(
    '/:type/_history',
    {
      schema: {
        summary: 'History of every resource of a type, newest version first',
        ...fhirOperation('Resources', 'readTypeHistory'),
        params: typeParams,
        querystring: historyQuery,
        response: { ...historyResponses, 404: unknownType },
      },
    },
    async (request, reply) => {
      assertResourceType(request.params.type);
      return history({ type: request.params.type }, request, reply);
    },
  );

  app.get(
    '/:type/:id/_history',
    {
      schema: {
        summary: 'History of a resource, newest version first',
        ...fhirOperation('Resources', 'readHistory'),
        params: instanceParams,
        querystring: historyQuery,
        response: { ...historyResponses, 404: notKnown },
      },
    },
    async (request, reply) => {
      const { type, id } = request.params;
      checkInstance(type, id);
      return history({ type, id }, request, reply);
    },
  );

  app.get(
    '/:type/:id/_history/:vid',
    {
      schema: {
        summary: 'Read one version of a resource',
        ...fhirOperation('Resources', 'readVersion'),
        params: versionParams,
        response: { 200: resource.describe('That version'), ...commonRefusals, 404: notKnown, 410: operationOutcome.describe('That version is the deletion') },
      },
    },
    async (request, reply) => {
      const { type, id, vid } = request.params;
      checkInstance(type, id);
      if (!/^[1-9]\d{0,9}$/.test(vid)) throw badRequest(`Invalid versionId ${JSON.stringify(vid)}: versions are positive integers`);
      return sendVersion(reply, 200, await readVersion(db, type, id, Number(vid)), { serviceBase });
    },
  );
};

/** A delete's answer: 204, with the deletion's version as ETag when it wrote one (not when it was deleted already, or nothing matched). */
function sendDeletion(reply: FastifyReply, versionId: number | undefined): FastifyReply {
  if (versionId !== undefined) reply.header('etag', `W/"${versionId}"`);
  return reply.code(204).send();
}

function optionalIfMatch(header: string | undefined): number | undefined {
  return header === undefined ? undefined : parseIfMatch(header);
}

/** The condition of a conditional update, delete or patch: the URL's query, which must name one. */
function requiredCondition(url: string, interaction: string): string {
  const condition = rawQueryOf(url);
  if (condition === '')
    throw badRequest(`${interaction} needs search parameters that select one resource (${interaction}?identifier=system|value), or an id (${interaction}/id)`);
  return condition;
}

/** The JSON Patch of a PATCH request: only application/json-patch+json is taken (not FHIRPath Patch, a Parameters body). */
function jsonPatchOf(contentType: string | undefined, body: unknown) {
  if (!contentType?.toLowerCase().startsWith(jsonPatchMediaType)) {
    throw new FhirError(
      415,
      'not-supported',
      `PATCH takes a JSON Patch as ${jsonPatchMediaType}, not ${contentType ?? 'no Content-Type'} (FHIRPath Patch is not supported)`,
    );
  }
  return asJsonPatch(body);
}

function historyUrl(serviceBase: string, scope: HistoryScope): string {
  if (scope.type === undefined) return `${serviceBase}/_history`;
  return scope.id === undefined ? `${serviceBase}/${scope.type}/_history` : `${serviceBase}/${scope.type}/${scope.id}/_history`;
}

/**
 * A `history` Bundle, newest version first, as FHIR's history interactions
 * return it: each version with the request that wrote it (POST for the first
 * version, or the first after a deletion; PUT; DELETE, without a resource).
 */
function historyBundle(page: HistoryPage, url: string, rawQuery: string, serviceBase: string) {
  const withToken = (token: string) => linkWithPageToken(url, pairsWithoutPageToken(rawQuery), token);
  const entries = page.versions.map(({ resource, versionId, lastUpdated, deleted, created }) => {
    const { resourceType: type, id } = resource as { resourceType: string; id: string };
    const request = deleted ? { method: 'DELETE', url: `${type}/${id}` } : created ? { method: 'POST', url: type } : { method: 'PUT', url: `${type}/${id}` };
    const status = deleted ? '204 No Content' : created ? '201 Created' : '200 OK';
    return {
      fullUrl: `${serviceBase}/${type}/${id}`,
      ...(deleted ? {} : { resource }),
      request,
      response: { status, etag: `W/"${versionId}"`, lastModified: lastUpdated },
    };
  });
  return {
    resourceType: 'Bundle' as const,
    id: randomUUID(),
    type: 'history' as const,
    ...(page.total === undefined ? {} : { total: page.total }),
    link: [
      { relation: 'self', url: rawQuery === '' ? url : `${url}?${rawQuery}` },
      ...(page.previousPageToken === undefined ? [] : [{ relation: 'previous', url: withToken(page.previousPageToken) }]),
      ...(page.nextPageToken === undefined ? [] : [{ relation: 'next', url: withToken(page.nextPageToken) }]),
    ],
    // FHIR JSON has no empty arrays: a page without versions has no entry.
    ...(entries.length === 0 ? {} : { entry: entries }),
  };
}
