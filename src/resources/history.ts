import { sql, type RawBuilder } from 'kysely';
import type { Db } from '../db/database.ts';
import type { FhirResource } from '../db/schema.ts';
import { fhirIdPattern } from '../fhir/definitions.ts';
import { isInstant, isStoredInstant } from '../fhir/instant.ts';
import { FhirError, badRequest, notFound } from '../fhir/outcome.ts';
import { formatParameters } from '../fhir/parameters.ts';
import { decodePageToken, encodePageToken, keysetPage, type Direction } from '../search/keyset-page.ts';
import { splitQuery } from '../search/query.ts';
import { inFhirOrder } from './store.ts';

/**
 * FHIR's history interactions at three levels: a resource's versions
 * (`Patient/1/_history`), a type's (`Patient/_history`), the system's
 * (`_history`), read from fhir.resource_history newest first, a page at a
 * time. Pages are keyset pages (last_updated, then resource_type, id and
 * version_id), like search's: versions written between two pages move
 * nothing. Deletions are versions of their own.
 */

export type HistoryScope = { type?: string; id?: string };

export type HistoryVersion = {
  resource: FhirResource;
  versionId: number;
  lastUpdated: string;
  deleted: boolean;
  /** The first version of the resource, or the first after a deletion: a create, not an update. */
  created: boolean;
};

export type HistoryPage = {
  versions: HistoryVersion[];
  /** All versions of the scope, when this page holds them all. */
  total?: number;
  nextPageToken?: string;
  previousPageToken?: string;
};

/** What a history request asks: versions written at or after `since`, `count` a page, from a page token. */
export type HistoryQuery = { since?: string; count: number; pageToken?: string };

export const defaultHistoryCount = 100;
export const maxHistoryCount = 1000;
/** A page's versions add up to at most this much JSON: past it the page ends early and next goes on. */
const pageBytes = 16 * 1024 * 1024;

/** Reads `_since`, `_count` and `_page_token` of a history request; `_at` and the rest are refused by name. */
export function parseHistoryQuery(rawQuery: string): HistoryQuery {
  const query: HistoryQuery = { count: defaultHistoryCount };
  for (const [name, value] of splitQuery(rawQuery)) {
    if (name === '_since') {
      if (!isInstant(value)) {
        throw badRequest(`_since must be an instant with a time zone, such as 2026-01-02T03:04:05Z, not '${value}'`);
      }
      query.since = value;
    } else if (name === '_count') {
      if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > maxHistoryCount)
        throw badRequest(`_count must be an integer from 1 to ${maxHistoryCount}, not '${value}'`);
      query.count = Number(value);
    } else if (name === '_page_token') {
      query.pageToken = value;
    } else if (name === '_at' || name === '_list' || name === '_sort') {
      throw new FhirError(400, 'not-supported', `History does not support ${name}: use _since (and _count)`);
    } else if (!formatParameters.has(name)) {
      throw badRequest(`Unknown history parameter '${name}' (supported: _since, _count)`);
    }
  }
  return query;
}

/** A page of the versions in `scope`, newest first. An instance with no version at all is a 404. */
export async function readHistoryPage(db: Db, scope: HistoryScope, query: HistoryQuery): Promise<HistoryPage> {
  const cursor = query.pageToken === undefined ? undefined : decodeCursor(query.pageToken);
  const backward = cursor?.direction === 'before';
  // Newest first; a page before a token is read oldest first from it, then turned round.
  const order = (table: 'h' | 'page') =>
    sql.raw(
      backward
        ? `${table}.last_updated, ${table}.resource_type, ${table}.id, ${table}.version_id`
        : `${table}.last_updated DESC, ${table}.resource_type DESC, ${table}.id DESC, ${table}.version_id DESC`,
    );
  const key = sql`(h.last_updated, h.resource_type, h.id, h.version_id)`;
  const conditions: RawBuilder<unknown>[] = [
    ...(scope.type === undefined ? [] : [sql`h.resource_type = ${scope.type}`]),
    ...(scope.id === undefined ? [] : [sql`h.id = ${scope.id}`]),
    ...(query.since === undefined ? [] : [sql`h.last_updated >= ${query.since}::timestamptz`]),
    ...(cursor === undefined
      ? []
      : [sql`${key} ${backward ? sql`>` : sql`<`} (${cursor.lastUpdated}::timestamptz, ${cursor.type}::text, ${cursor.id}::text, ${cursor.versionId}::int)`]),
  ];
  const where = conditions.length === 0 ? sql`true` : sql.join(conditions, sql` AND `);
  // The page's versions (one more than asked, to know whether another page follows), cut where their JSON passes pageBytes.
  const { rows } = await sql<{ content: FhirResource; version_id: number; instant: string; is_deletion: boolean; created: boolean; candidates: number }>`
    SELECT content, version_id, instant, is_deletion, created, candidates FROM (
      SELECT page.*, count(*) OVER () :: int AS candidates,
             sum(octet_length(content::text)) OVER (ORDER BY ${order('page')} ROWS UNBOUNDED PRECEDING) AS running,
             row_number() OVER (ORDER BY ${order('page')}) AS position
      FROM (
        SELECT h.content, h.last_updated, h.resource_type, h.id, h.version_id, h.is_deletion,
               fhir.format_instant(h.last_updated) AS instant,
               previous.is_deletion IS NOT FALSE AS created
        FROM fhir.resource_history h
        LEFT JOIN fhir.resource_history previous
          ON previous.resource_type = h.resource_type AND previous.id = h.id AND previous.version_id = h.version_id - 1
        WHERE ${where}
        ORDER BY ${order('h')}
        LIMIT ${query.count + 1}) page
    ) sized
    WHERE position = 1 OR running <= ${pageBytes}
    ORDER BY position`.execute(db);

  if (rows.length === 0 && cursor === undefined && scope.id !== undefined && query.since === undefined) {
    throw notFound(`${scope.type}/${scope.id} is not known`);
  }
  const page = keysetPage(
    rows.map((row): HistoryVersion => ({
      resource: inFhirOrder(row.content),
      versionId: row.version_id,
      lastUpdated: row.instant,
      deleted: row.is_deletion,
      created: row.created,
    })),
    { count: query.count, direction: cursor?.direction ?? 'after', fromToken: cursor !== undefined, cut: (rows[0]?.candidates ?? 0) > rows.length },
  );
  const tokenAt = (version: HistoryVersion, direction: Direction) =>
    encodePageToken([version.lastUpdated, version.resource.resourceType, version.resource.id, version.versionId], direction);
  return {
    versions: page.items,
    ...(cursor === undefined && page.next === undefined ? { total: page.items.length } : {}),
    ...(page.next === undefined ? {} : { nextPageToken: tokenAt(page.next, 'after') }),
    ...(page.previous === undefined ? {} : { previousPageToken: tokenAt(page.previous, 'before') }),
  };
}

/** A page token: a version's key (src/search/keyset-page.ts). */
type Cursor = { lastUpdated: string; type: string; id: string; versionId: number; direction: Direction };

/** A history token, its values checked before any reaches SQL. */
function decodeCursor(token: string): Cursor {
  const decoded = decodePageToken(token, 4);
  const [lastUpdated, type, id, versionId] = decoded?.key ?? [];
  if (
    decoded !== undefined &&
    typeof lastUpdated === 'string' &&
    isStoredInstant(lastUpdated) &&
    typeof type === 'string' &&
    /^[A-Z][A-Za-z]{0,63}$/.test(type) &&
    typeof id === 'string' &&
    fhirIdPattern.test(id) &&
    typeof versionId === 'number' &&
    Number.isInteger(versionId) &&
    versionId > 0 &&
    versionId < 2 ** 31
  ) {
    return { lastUpdated, type, id, versionId, direction: decoded.direction };
  }
  throw badRequest('Invalid _page_token: use the next or previous link of a history page');
}
