import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Db } from '../../db/database.ts';
import type { FhirResource } from '../../db/schema.ts';
import { parseSearchQuery, type SearchQuery } from '../../search/query.ts';
import { searchResources, type SearchPage } from '../../search/search.ts';
import { assertResourceType } from '../../resources/store.ts';
import { z } from 'zod';
import { fhirJson } from '../errors.ts';
import { bundle, commonRefusals, fhirOperation, operationOutcome } from '../schemas.ts';
import { linkWithPageToken, pairsWithoutPageToken, rawQueryOf } from '../raw-query.ts';

export type SearchRoutesOptions = { db: Db; serviceBase: string };

/** A query parameter given once or repeated (parameters repeated are ANDed). */
const parameter = (description: string) =>
  z
    .union([z.string(), z.array(z.string())])
    .optional()
    .describe(description);

/**
 * The search parameters every type has, for the description; every R4
 * parameter of the type is accepted too (the CapabilityStatement lists them).
 * The query itself is read raw (see below); nothing here refuses one.
 */
const searchQuery = z.looseObject({
  _id: parameter('Logical ids, comma-separated'),
  _lastUpdated: parameter('A date with a prefix: gt2025-03-04T05:06:07.123456Z (exact to the microsecond)'),
  _count: parameter('Page size, 1-1000 (default 20)'),
  _sort: parameter('_lastUpdated, -_lastUpdated, _id or -_id'),
  _include: parameter('Type:parameter[:target], or Type:* or *'),
  _revinclude: parameter('Type:parameter[:target], or Type:*'),
  _summary: parameter('count (the total alone) or false'),
  _elements: parameter('Elements to keep, comma-separated'),
  _total: parameter('accurate or estimate'),
  _page_token: parameter("The next link's token"),
});
const searchTypeParams = z.object({ type: z.string().describe('An R4 resource type, e.g. Appointment') });
const searchResponses = {
  200: bundle.describe('A searchset Bundle: matches (search.mode match), included resources (include); a next link while more pages remain'),
  ...commonRefusals,
  404: operationOutcome.describe('Not an R4 resource type'),
};

/**
 * FHIR search: GET /{Type}?… and POST /{Type}/_search (form-encoded body),
 * answered with a searchset Bundle whose next link carries the page token.
 */
export const searchRoutes: FastifyPluginAsync<SearchRoutesOptions> = async (app, { db, serviceBase }) => {
  // The query is read raw: FHIR values keep '+' (time zones) and their own escapes.
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) => done(null, body));

  const search = async (request: FastifyRequest, type: string, rawQuery: string, reply: FastifyReply) => {
    assertResourceType(type);
    const lenient = /(^|[;,\s])handling=lenient\b/.test(String(request.headers.prefer ?? ''));
    const query = parseSearchQuery(type, rawQuery, { lenient });
    const page = await searchResources(db, query);
    return reply.type(fhirJson).send(searchsetBundle(page, query, `${serviceBase}/${type}`, rawQuery, serviceBase));
  };

  app.get<{ Params: { type: string } }>(
    '/:type',
    {
      schema: {
        summary: 'Search resources of a type (e.g. Appointment?status=booked&_include=Appointment:patient)',
        ...fhirOperation('Search', 'searchType'),
        params: searchTypeParams,
        querystring: searchQuery,
        response: searchResponses,
      },
    },
    async (request, reply) => search(request, request.params.type, rawQueryOf(request.url), reply),
  );

  app.post<{ Params: { type: string }; Body: string | undefined }>(
    '/:type/_search',
    {
      schema: {
        summary: 'Search resources of a type, parameters in a form-encoded body',
        ...fhirOperation('Search', 'searchTypeWithPost'),
        consumes: ['application/x-www-form-urlencoded'],
        params: searchTypeParams,
        body: z.string().optional().describe('The search parameters, form-encoded: status=booked&_count=50'),
        response: searchResponses,
      },
    },
    async (request, reply) => {
      const parts = [rawQueryOf(request.url), typeof request.body === 'string' ? request.body : ''].filter((part) => part !== '');
      return search(request, request.params.type, parts.join('&'), reply);
    },
  );
};

/**
 * The searchset Bundle of one page. Its self link is the search as run: the
 * parameters used, without those left out under `Prefer: handling=lenient`
 * (FHIR: self shows what was used) and without the page token; next and
 * previous carry the token of the page after or before.
 */
function searchsetBundle(page: SearchPage, query: SearchQuery, searchUrl: string, rawQuery: string, serviceBase: string) {
  // The pairs as the parser numbered them (splitQuery's): those it left out are dropped by position, not by name (one of two birthdate= may be used).
  const ignoredPositions = new Set(query.ignored.map((ignored) => ignored.position));
  const used = rawQuery
    .split('&')
    .filter((pair) => pair !== '')
    .filter((_pair, position) => !ignoredPositions.has(position))
    .join('&');
  const usedPairs = pairsWithoutPageToken(used);
  const withToken = (token: string) => linkWithPageToken(searchUrl, usedPairs, token);
  const self = query.pageToken !== undefined ? withToken(query.pageToken) : usedPairs.length === 0 ? searchUrl : `${searchUrl}?${usedPairs.join('&')}`;
  const entry = (mode: 'match' | 'include') => (resource: FhirResource) => ({
    fullUrl: `${serviceBase}/${resource.resourceType}/${resource.id}`,
    resource,
    search: { mode },
  });
  const entries = [
    ...page.matches.map(entry('match')),
    ...page.included.map(entry('include')),
    // Under Prefer: handling=lenient, what was left out of the search, as FHIR's search.mode "outcome".
    ...(query.ignored.length === 0
      ? []
      : [
          {
            resource: {
              resourceType: 'OperationOutcome',
              issue: query.ignored.map(({ parameter, reason }) => ({
                severity: 'warning',
                code: 'not-supported',
                details: { text: `${parameter}: ${reason}` },
              })),
            },
            search: { mode: 'outcome' },
          },
        ]),
  ];
  return {
    resourceType: 'Bundle',
    id: randomUUID(),
    type: 'searchset',
    ...(page.total === undefined ? {} : { total: page.total }),
    link: [
      { relation: 'self', url: self },
      ...(page.previousPageToken === undefined ? [] : [{ relation: 'previous', url: withToken(page.previousPageToken) }]),
      ...(page.nextPageToken === undefined ? [] : [{ relation: 'next', url: withToken(page.nextPageToken) }]),
    ],
    // FHIR JSON has no empty arrays: a page without resources (_summary=count) has no entry.
    ...(entries.length === 0 ? {} : { entry: entries }),
  };
}
