import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Db } from '../../db/database.ts';
import { badRequest } from '../../fhir/outcome.ts';
import { parseIfMatch } from '../../resources/bundle.ts';
import {
  assertResourceBody,
  assertResourceId,
  assertResourceType,
  createResource,
  deleteResource,
  readHistory,
  readResource,
  readVersion,
  updateResource,
  type HistoryEntry,
} from '../../resources/store.ts';
import { fhirJson } from '../errors.ts';
import { bundle, commonRefusals, fhirOperation, operationOutcome, resource } from '../schemas.ts';
import { sendVersion } from '../fhir-reply.ts';

export type ResourceRoutesOptions = { db: Db; serviceBase: string };

const typeParams = z.object({ type: z.string().describe('An R4 resource type, e.g. Patient') });
const instanceParams = typeParams.extend({ id: z.string().describe('The logical id') });
const versionParams = instanceParams.extend({ vid: z.string().describe('A versionId') });
const resourceBody = z.looseObject({ resourceType: z.string() }).describe('A FHIR resource');
const unknownType = operationOutcome.describe('Not an R4 resource type');
const notKnown = operationOutcome.describe('No such resource (or type)');
const tooLarge = operationOutcome.describe('The body is over 10 MiB');
const ifMatchHeaders = z.object({ 'if-match': z.string().optional().describe('W/"<versionId>": write only if this is the current version') });

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
        body: resourceBody,
        response: { 201: resource.describe('Created: the resource as stored, with id and meta; Location, ETag and Last-Modified headers'), ...commonRefusals, 404: unknownType, 413: tooLarge },
      },
    },
    async (request, reply) => {
      const { type } = request.params;
      assertResourceType(type);
      assertResourceBody(type, request.body);
      return sendVersion(reply, 201, await createResource(db, type, request.body), { serviceBase, location: true });
    },
  );

  app.get(
    '/:type/:id',
    {
      schema: {
        summary: 'Read a resource (its current version)',
        ...fhirOperation('Resources', 'readResource'),
        params: instanceParams,
        response: { 200: resource.describe('The current version; ETag and Last-Modified headers'), ...commonRefusals, 404: notKnown, 410: operationOutcome.describe('Deleted') },
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
        response: { 204: z.undefined().describe("Deleted (or already deleted); ETag names the deletion's version"), ...commonRefusals, 404: notKnown, 412: operationOutcome.describe('If-Match names a version that is not the current one') },
      },
    },
    async (request, reply) => {
      const { type, id } = request.params;
      checkInstance(type, id);
      const { versionId } = await deleteResource(db, type, id, optionalIfMatch(request.headers['if-match']));
      if (versionId !== undefined) reply.header('etag', `W/"${versionId}"`);
      return reply.code(204).send();
    },
  );

  app.get(
    '/:type/:id/_history',
    {
      schema: {
        summary: 'History of a resource, newest version first',
        ...fhirOperation('Resources', 'readHistory'),
        params: instanceParams,
        response: { 200: bundle.describe('A history Bundle; deletions are entries without a resource'), ...commonRefusals, 404: notKnown },
      },
    },
    async (request, reply) => {
      const { type, id } = request.params;
      checkInstance(type, id);
      const versions = await readHistory(db, type, id);
      return reply.type(fhirJson).send(historyBundle(versions, type, id, `${serviceBase}/${type}/${id}`));
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
      if (!/^[1-9]\d{0,9}$/.test(vid)) throw badRequest(`Invalid versionId '${vid}': versions are positive integers`);
      return sendVersion(reply, 200, await readVersion(db, type, id, Number(vid)), { serviceBase });
    },
  );
};

function optionalIfMatch(header: string | undefined): number | undefined {
  return header === undefined ? undefined : parseIfMatch(header);
}

/** A `history` Bundle, newest version first, as FHIR's _history interaction returns it. */
function historyBundle(versions: HistoryEntry[], type: string, id: string, resourceUrl: string) {
  return {
    resourceType: 'Bundle' as const,
    type: 'history' as const,
    total: versions.length,
    link: [{ relation: 'self', url: `${resourceUrl}/_history` }],
    entry: versions.map((version, index) => {
      const previous = versions[index + 1];
      const created = previous === undefined || previous.deleted;
      const request = version.deleted
        ? { method: 'DELETE', url: `${type}/${id}` }
        : created
          ? { method: 'POST', url: type }
          : { method: 'PUT', url: `${type}/${id}` };
      const status = version.deleted ? '204 No Content' : created ? '201 Created' : '200 OK';
      return {
        fullUrl: resourceUrl,
        ...(version.deleted ? {} : { resource: version.resource }),
        request,
        response: { status, etag: `W/"${version.versionId}"`, lastModified: version.lastUpdated },
      };
    }),
  };
}
