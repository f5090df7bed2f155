import { sql, type RawBuilder } from 'kysely';
import type { Db } from '../db/database.ts';
import type { FhirResource } from '../db/schema.ts';
import { fhirIdPattern } from '../fhir/definitions.ts';
import { isStoredInstant } from '../fhir/instant.ts';
import { decodePageToken, encodePageToken, keysetPage, type Direction } from './keyset-page.ts';
import { badRequest, FhirError } from '../fhir/outcome.ts';
import { accessor, compileFilters, compileRelated, referencesAnyOf, referenceStrings } from './jsonpath.ts';
import type { Include, RelatedFilter, SearchQuery, SortOrder } from './query.ts';

/**
 * Bounds on one answer, so that no request can exhaust memory (resources
 * can be up to 10 MiB each): a page's matches add up to at most pageBytes of
 * JSON (past it the page ends early, and its next link goes on from there; a
 * page always holds one match); its _include and _revinclude resources to at
 * most includeLimit resources and includeBytes (past them the search is
 * refused: lower _count).
 */
export const pageBytes = 16 * 1024 * 1024;
export const includeLimit = 1000;
export const includeBytes = 16 * 1024 * 1024;
const defaultCount = 20;
/** Rounds of `:iterate` includes before stopping (FHIR lets servers bound this). */
const iterateRounds = 3;
/**
 * A chain or _has that leads to at most this many related resources is
 * searched through them (GIN and primary key); past it, row by row with
 * fhir.related_resources_match, as subscription criteria are.
 */
const relatedLookupLimit = 1000;

export type SearchPage = {
  matches: FhirResource[];
  included: FhirResource[];
  /** The number of matches in all pages, when asked for or known for free. */
  total?: number;
  /** The _page_token of the next page, if there is one. */
  nextPageToken?: string;
  /** The _page_token of the page before, on a page reached by a token. */
  previousPageToken?: string;
};

/** A page token: the sort key of a row (src/search/keyset-page.ts), with the sort it was made for. */
type Cursor = { sort: string; lastUpdated: string; id: string; direction: Direction };

/**
 * Runs a search: one page of matches in keyset order (no OFFSET: a page token
 * is a row's sort key, so inserts between pages move nothing), then its
 * _include and _revinclude resources. A page before a token is read in the
 * reverse order from the token, then turned round.
 */
export async function searchResources(db: Db, query: SearchQuery): Promise<SearchPage> {
  const sort: SortOrder = query.sort ?? { by: '_lastUpdated', descending: false };
  const count = query.count ?? defaultCount;
  const where = await whereMatching(db, query);
  if (query.summary === 'count') return { matches: [], included: [], total: await countMatches(db, where) };
  const cursor = query.pageToken === undefined ? undefined : decodeCursor(query.pageToken, sortKey(sort));
  const backward = cursor?.direction === 'before';
  // Read away from the token: forward after it, in the reverse order before it.
  const readOrder: SortOrder = backward ? { ...sort, descending: !sort.descending } : sort;

  // The page's candidates, cut where their JSON passes pageBytes (in PostgreSQL, so that only what fits is sent).
  const rows = await sql<{ content: FhirResource; candidates: number }>`
    SELECT content, candidates FROM (
      SELECT content, count(*) OVER () :: int AS candidates,
             sum(octet_length(content::text)) OVER (ORDER BY ${orderBy(readOrder)} ROWS UNBOUNDED PRECEDING) AS running,
             row_number() OVER (ORDER BY ${orderBy(readOrder)}) AS position
      FROM (
        SELECT content, last_updated, id FROM fhir.resources
        WHERE ${where}
          AND ${beyond(cursor, readOrder)}
        ORDER BY ${orderBy(readOrder)}
        LIMIT ${count + 1}) candidate
    ) sized
    WHERE position = 1 OR running <= ${pageBytes}
    ORDER BY position`.execute(db);

  const page = keysetPage(
    rows.rows.map((row) => row.content),
    { count, direction: cursor?.direction ?? 'after', fromToken: cursor !== undefined, cut: (rows.rows[0]?.candidates ?? 0) > rows.rows.length },
  );
  const matchesOnPage = page.items;

  let total: number | undefined;
  if (query.total === 'accurate' || query.total === 'estimate') {
    total = await countMatches(db, where);
  } else if (cursor === undefined && page.next === undefined && query.total !== 'none') {
    total = matchesOnPage.length;
  }

  const tokenAt = (resource: FhirResource, direction: Direction) => encodePageToken([sortKey(sort), lastUpdatedOf(resource), resource.id!], direction);
  return {
    matches: query.elements === undefined ? matchesOnPage : matchesOnPage.map((resource) => subsetted(resource, query.elements!)),
    included: await includedResources(db, matchesOnPage, query.include, query.revinclude),
    ...(total === undefined ? {} : { total }),
    ...(page.next === undefined ? {} : { nextPageToken: tokenAt(page.next, 'after') }),
    ...(page.previous === undefined ? {} : { previousPageToken: tokenAt(page.previous, 'before') }),
  };
}

/** The SQL condition on fhir.resources rows that a search's filters, chains and _has make. */
async function whereMatching(db: Db, query: SearchQuery): Promise<RawBuilder<unknown>> {
  const related = await relatedConditions(db, query.resourceType, query.related);
  return sql.join([sql`resource_type = ${query.resourceType}`, matches(compileFilters(query.filters)), ...related], sql` AND `);
}

/**
 * The ids of at most `limit` current resources a search's filters select,
 * whatever their size (a page of matches is cut by its bytes; this is not):
 * what a conditional interaction needs to tell none, one and several apart.
 */
export async function matchingIds(db: Db, query: SearchQuery, limit: number): Promise<string[]> {
  const { rows } = await sql<{ id: string }>`SELECT id FROM fhir.resources WHERE ${await whereMatching(db, query)} LIMIT ${limit}`.execute(db);
  return rows.map((row) => row.id);
}

/**
 * The resources that `include` and `revinclude` add to `resources` (FHIR
 * search.mode "include"), without duplicates and without the resources
 * themselves. Also used to build notification Bundles.
 */
export async function includedResources(
  db: Db,
  resources: readonly FhirResource[],
  include: readonly Include[],
  revinclude: readonly Include[],
): Promise<FhirResource[]> {
  const seen = new Set(resources.map(keyOf));
  const added: FhirResource[] = [];
  const budget: Budget = { resources: includeLimit, bytes: includeBytes };
  const keep = (found: FhirResource[]) => {
    const fresh = found.filter((resource) => !seen.has(keyOf(resource)));
    for (const resource of fresh) seen.add(keyOf(resource));
    added.push(...fresh);
    return fresh;
  };

  for (const spec of include) keep(await followReferences(db, resources, spec, budget));
  for (const spec of revinclude) keep(await findReferrers(db, resources, spec, budget));

  // :iterate applies the same includes to what the previous round added.
  let frontier = added.slice();
  for (let round = 0; round < iterateRounds && frontier.length > 0; round++) {
    const next: FhirResource[] = [];
    for (const spec of include.filter((candidate) => candidate.iterate)) next.push(...keep(await followReferences(db, frontier, spec, budget)));
    for (const spec of revinclude.filter((candidate) => candidate.iterate)) next.push(...keep(await findReferrers(db, frontier, spec, budget)));
    frontier = next;
  }
  return added;
}

/** _include: the resources that `spec.parameter` of the sources refers to ([*]: each item of an array-valued element, such as generalPractitioner). */
async function followReferences(db: Db, sources: readonly FhirResource[], spec: Include, budget: Budget): Promise<FhirResource[]> {
  const ids = sources.filter((resource) => resource.resourceType === spec.sourceType).map((resource) => resource.id!);
  if (ids.length === 0) return [];
  const found: FhirResource[] = [];
  for (const path of spec.parameter.paths) {
    const targets = sql`
      SELECT DISTINCT ON (target.resource_type, target.id) target.content
      FROM fhir.resources source
      CROSS JOIN LATERAL jsonb_path_query(source.content, ${`${accessor(path)}[*]`}::jsonpath) AS reference
      CROSS JOIN LATERAL regexp_match(reference ->> 'reference', '^([A-Z][A-Za-z]+)/([A-Za-z0-9.-]{1,64})$') AS parts
      JOIN fhir.resources target ON target.resource_type = parts[1] AND target.id = parts[2]
      WHERE source.resource_type = ${spec.sourceType} AND source.id = ANY(${ids})
        AND ${spec.targetType === undefined ? sql`true` : sql`target.resource_type = ${spec.targetType}`}`;
    found.push(...(await takeWithin(db, targets, budget)));
  }
  return found;
}

/** _revinclude: resources of `spec.sourceType` whose `spec.parameter` refers to one of the targets. */
async function findReferrers(db: Db, targets: readonly FhirResource[], spec: Include, budget: Budget): Promise<FhirResource[]> {
  const references = targets
    .filter((resource) => spec.targetType === undefined || resource.resourceType === spec.targetType)
    .map((resource) => `${resource.resourceType}/${resource.id}`);
  if (references.length === 0) return [];
  const referrers = sql`
    SELECT content FROM fhir.resources
    WHERE resource_type = ${spec.sourceType}
      AND content @@ ${referencesAnyOf(spec.parameter.paths, references)}::jsonpath
    ORDER BY last_updated, id`;
  return takeWithin(db, referrers, budget);
}

/** What is left of includeLimit and includeBytes for a page's includes. */
type Budget = { resources: number; bytes: number };

/**
 * The resources `found` selects (a query with a `content` column), all of
 * them or a 400 too-costly if they pass what is left of the budget: counted
 * and measured in PostgreSQL, which sends no more than fits.
 */
async function takeWithin(db: Db, found: RawBuilder<unknown>, budget: Budget): Promise<FhirResource[]> {
  const { rows } = await sql<{ content: FhirResource; size: number; candidates: number }>`
    SELECT content, size, candidates FROM (
      SELECT content, octet_length(content::text) AS size, count(*) OVER () :: int AS candidates,
             sum(octet_length(content::text)) OVER (ROWS UNBOUNDED PRECEDING) AS running
      FROM (${found}) found
    ) sized
    WHERE running <= ${budget.bytes}
    LIMIT ${budget.resources + 1}`.execute(db);
  const candidates = rows[0]?.candidates ?? 0;
  if (rows.length > budget.resources || candidates > rows.length) {
    throw new FhirError(
      400,
      'too-costly',
      `The _include and _revinclude resources of this page pass ${includeLimit.toLocaleString('en')} resources or ${includeBytes / 1024 / 1024} MiB: lower _count, or include less`,
    );
  }
  budget.resources -= rows.length;
  budget.bytes -= rows.reduce((sum, row) => sum + row.size, 0);
  return rows.map((row) => row.content);
}

async function countMatches(db: Db, where: RawBuilder<unknown>): Promise<number> {
  const counted = await sql<{ total: number }>`SELECT count(*)::int AS total FROM fhir.resources WHERE ${where}`.execute(db);
  return counted.rows[0]?.total ?? 0;
}

/**
 * Chains and _has as SQL conditions on the searched rows: through the
 * related resources when there are few (a chain becomes a reference filter,
 * _has a list of ids), otherwise row by row.
 */
async function relatedConditions(db: Db, resourceType: string, related: readonly RelatedFilter[]): Promise<RawBuilder<unknown>[]> {
  return Promise.all(
    related.map(async (condition) => {
      const found = condition.kind === 'chain' ? await chainTargets(db, condition) : await referringIds(db, resourceType, condition);
      if (found.length > relatedLookupLimit) {
        return sql`fhir.related_resources_match(resource_type, id, content, ${JSON.stringify(compileRelated([condition]))}::jsonb)`;
      }
      if (found.length === 0) return sql`false`;
      return condition.kind === 'chain' ? sql`content @@ ${referencesAnyOf(condition.reference.paths, found)}::jsonpath` : sql`id = ANY(${found})`;
    }),
  );
}

/** `Type/id` of the resources a chain's targets match, up to one past the lookup limit. */
async function chainTargets(db: Db, chain: Extract<RelatedFilter, { kind: 'chain' }>): Promise<string[]> {
  const found: string[] = [];
  for (const { type, filter } of chain.targets) {
    const { rows } = await sql<{ reference: string }>`
      SELECT resource_type || '/' || id AS reference FROM fhir.resources
      WHERE resource_type = ${type} AND ${matches(compileFilters([filter]))}
      LIMIT ${relatedLookupLimit + 1 - found.length}`.execute(db);
    found.push(...rows.map((row) => row.reference));
    if (found.length > relatedLookupLimit) break;
  }
  return found;
}

/** Ids of the `resourceType` resources that the resources matching a _has refer to, up to one past the lookup limit. */
async function referringIds(db: Db, resourceType: string, has: Extract<RelatedFilter, { kind: 'has' }>): Promise<string[]> {
  const prefix = `${resourceType}/`;
  const { rows } = await sql<{ id: string }>`
    SELECT DISTINCT substr(reference #>> '{}', ${prefix.length + 1}) AS id
    FROM fhir.resources source
    CROSS JOIN LATERAL unnest(${referenceStrings(has.reference)}::jsonpath[]) AS path
    CROSS JOIN LATERAL jsonb_path_query(source.content, path) AS reference
    WHERE source.resource_type = ${has.sourceType} AND ${matches(compileFilters([has.filter]), sql`source.content`)}
      AND starts_with(reference #>> '{}', ${prefix})
    LIMIT ${relatedLookupLimit + 1}`.execute(db);
  return rows.map((row) => row.id);
}

/**
 * A match cut to the `_elements` asked for (a choice element by its name:
 * `value` keeps valueQuantity), with id and meta, tagged SUBSETTED as FHIR
 * requires of a resource that is not whole.
 */
function subsetted(resource: FhirResource, elements: readonly string[]): FhirResource {
  const kept = Object.entries(resource).filter(
    ([key]) => key === 'resourceType' || key === 'id' || key === 'meta' || elements.some((name) => key === name || new RegExp(`^${name}[A-Z]`).test(key)),
  );
  const meta = (resource.meta ?? {}) as { tag?: unknown[] };
  return {
    ...(Object.fromEntries(kept) as FhirResource),
    meta: { ...meta, tag: [...(meta.tag ?? []), { system: 'http://terminology.hl7.org/CodeSystem/v3-ObservationValue', code: 'SUBSETTED' }] },
  };
}

function matches(predicate: string | null, content: RawBuilder<unknown> = sql`content`): RawBuilder<unknown> {
  return predicate === null ? sql`true` : sql`${content} @@ ${predicate}::jsonpath`;
}

/** The rows past the token in the order they are read: after it in `order`. */
function beyond(cursor: Cursor | undefined, order: SortOrder): RawBuilder<unknown> {
  if (cursor === undefined) return sql`true`;
  if (order.by === '_id') return order.descending ? sql`id < ${cursor.id}` : sql`id > ${cursor.id}`;
  const position = sql`(${cursor.lastUpdated}::timestamptz, ${cursor.id}::text)`;
  return order.descending ? sql`(last_updated, id) < ${position}` : sql`(last_updated, id) > ${position}`;
}

function orderBy(sort: SortOrder): RawBuilder<unknown> {
  if (sort.by === '_id') return sort.descending ? sql`id DESC` : sql`id`;
  return sort.descending ? sql`last_updated DESC, id DESC` : sql`last_updated, id`;
}

function sortKey(sort: SortOrder): string {
  return `${sort.descending ? '-' : ''}${sort.by}`;
}

function lastUpdatedOf(resource: FhirResource): string {
  return (resource.meta as { lastUpdated: string }).lastUpdated;
}

function keyOf(resource: FhirResource): string {
  return `${resource.resourceType}/${resource.id}`;
}

/** A token of this search's sort, its values checked before any reaches SQL. */
function decodeCursor(token: string, expectedSort: string): Cursor {
  const decoded = decodePageToken(token, 3);
  const [sort, lastUpdated, id] = decoded?.key ?? [];
  if (
    decoded !== undefined &&
    typeof sort === 'string' &&
    sort === expectedSort &&
    typeof lastUpdated === 'string' &&
    isStoredInstant(lastUpdated) &&
    typeof id === 'string' &&
    fhirIdPattern.test(id)
  ) {
    return { sort, lastUpdated, id, direction: decoded.direction };
  }
  throw badRequest('Invalid _page_token: use the next or previous link of a page, with the same _sort');
}
