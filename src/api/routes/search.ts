import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Db } from '../../db/database.ts';
import type { FhirResource } from '../../db/schema.ts';
import { parseSearchQuery } from '../../search/query.ts';
import { searchResources, type SearchPage } from '../../search/search.ts';
import { assertResourceType } from '../../resources/store.ts';
import { fhirJson } from '../errors.ts';

export type SearchRoutesOptions = { db: Db; serviceBase: string };

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
    return reply.type(fhirJson).send(searchsetBundle(page, query.ignored, `${serviceBase}/${type}`, rawQuery, serviceBase));
  };

  app.get<{ Params: { type: string } }>('/:type', { schema: { summary: 'Search resources of a type' } }, async (request, reply) =>
    search(request, request.params.type, rawQueryOf(request.url), reply),
  );

  app.post<{ Params: { type: string }; Body: string | undefined }>(
    '/:type/_search',
    { schema: { summary: 'Search resources of a type, parameters in a form-encoded body' } },
    async (request, reply) => {
      const parts = [rawQueryOf(request.url), typeof request.body === 'string' ? request.body : ''].filter((part) => part !== '');
      return search(request, request.params.type, parts.join('&'), reply);
    },
  );
};

function rawQueryOf(url: string): string {
  const questionMark = url.indexOf('?');
  return questionMark === -1 ? '' : url.slice(questionMark + 1);
}

function searchsetBundle(page: SearchPage, ignored: string[], searchUrl: string, rawQuery: string, serviceBase: string) {
  const withoutToken = rawQuery.split('&').filter((pair) => pair !== '' && !pair.startsWith('_page_token='));
  const url = (pairs: string[]) => (pairs.length === 0 ? searchUrl : `${searchUrl}?${pairs.join('&')}`);
  const entry = (mode: 'match' | 'include') => (resource: FhirResource) => ({
    fullUrl: `${serviceBase}/${resource.resourceType}/${resource.id}`,
    resource,
    search: { mode },
  });
  const entries = [
    ...page.matches.map(entry('match')),
    ...page.included.map(entry('include')),
    // Under Prefer: handling=lenient, what was left out of the search, as FHIR's search.mode "outcome".
    ...(ignored.length === 0
      ? []
      : [{ resource: { resourceType: 'OperationOutcome', issue: ignored.map((text) => ({ severity: 'warning', code: 'not-supported', details: { text } })) }, search: { mode: 'outcome' } }]),
  ];
  return {
    resourceType: 'Bundle',
    id: randomUUID(),
    type: 'searchset',
    ...(page.total === undefined ? {} : { total: page.total }),
    link: [
      { relation: 'self', url: url(rawQuery.split('&').filter((pair) => pair !== '')) },
      ...(page.nextPageToken === undefined
        ? []
        : [{ relation: 'next', url: url([...withoutToken, `_page_token=${encodeURIComponent(page.nextPageToken)}`]) }]),
    ],
    // FHIR JSON has no empty arrays: a page without resources (_summary=count) has no entry.
    ...(entries.length === 0 ? {} : { entry: entries }),
  };
}
