import type { FastifyReply } from 'fastify';
import type { StoredVersion } from '../resources/store.ts';
import { fhirJson } from './errors.ts';

/** Answers with one resource version and the headers FHIR clients use: ETag, Last-Modified and, for writes, Location. */
export function sendVersion(reply: FastifyReply, status: number, version: StoredVersion, options: { serviceBase: string; location?: boolean }): FastifyReply {
  const { resource, versionId, lastUpdated } = version;
  reply.code(status).type(fhirJson).header('etag', `W/"${versionId}"`).header('last-modified', new Date(lastUpdated).toUTCString());
  if (options.location) {
    reply.header('location', `${options.serviceBase}/${resource.resourceType}/${resource.id}/_history/${versionId}`);
  }
  return reply.send(resource);
}
