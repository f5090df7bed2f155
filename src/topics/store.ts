import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import { compileTopic, type CompiledTopic } from './compile.ts';
import { parseSubscriptionTopic, TopicRefused, type SubscriptionTopic } from './definition.ts';

/**
 * The topics an operator added (webhook.subscription_topics, migration 0019):
 * added once per canonical URL and version, never changed in place, retired
 * rather than removed.
 */

export type StoredTopic = {
  id: string;
  url: string;
  version: string | null;
  title: string | null;
  status: 'active' | 'retired';
  definition: SubscriptionTopic;
  compiled: CompiledTopic;
  addedAt: Date;
  retiredAt: Date | null;
};

/** What adding a definition did: added it, or found the same definition there already (retired, perhaps: adding does not bring it back). */
export type AddedTopic = { outcome: 'added' | 'unchanged'; url: string; version: string | null; status: 'active' | 'retired' };

/**
 * Checks, compiles and stores SubscriptionTopics, all or none (TopicRefused
 * names the element it cannot honour and the definition's index). The same definition again is unchanged; a
 * different one under the same URL and version is refused: a canonical's
 * version does not change meaning, a changed topic is a new version.
 */
export async function addTopics(db: Db, definitions: unknown[]): Promise<AddedTopic[]> {
  const checked = definitions.map((json, index) => {
    try {
      const definition = parseSubscriptionTopic(json);
      return { index, json, definition, compiled: compileTopic(definition), version: definition.version ?? null };
    } catch (error) {
      throw error instanceof TopicRefused ? new TopicRefused(error.element, error.reason, index) : error;
    }
  });
  return db.transaction().execute(async (trx) => {
    const added: AddedTopic[] = [];
    for (const { index, json, definition, compiled, version } of checked) {
      const existing = await trx
        .selectFrom('webhook.subscription_topics')
        .select(['definition', 'status'])
        .where('url', '=', definition.url)
        .where((eb) => (version === null ? eb('version', 'is', null) : eb('version', '=', version)))
        .forUpdate()
        .executeTakeFirst();
      if (existing === undefined) {
        await trx
          .insertInto('webhook.subscription_topics')
          .values({ url: definition.url, version, title: definition.title ?? null, definition: JSON.stringify(json), compiled: JSON.stringify(compiled) })
          .execute();
        added.push({ outcome: 'added', url: definition.url, version, status: 'active' });
      } else if (sameJson(existing.definition, json)) {
        added.push({ outcome: 'unchanged', url: definition.url, version, status: existing.status });
      } else {
        throw new TopicRefused(
          'SubscriptionTopic.version',
          `${canonicalOf(definition.url, version)} is already defined differently: a changed topic needs a new version`,
          index,
        );
      }
    }
    return added;
  });
}

/** Every topic, newest first within a URL. */
export async function listTopics(db: Db): Promise<StoredTopic[]> {
  const rows = await db.selectFrom('webhook.subscription_topics').selectAll().orderBy('url').orderBy('added_at', 'desc').execute();
  return rows.map((row) => ({
    id: String(row.id),
    url: row.url,
    version: row.version,
    title: row.title,
    status: row.status,
    definition: row.definition as SubscriptionTopic,
    compiled: row.compiled as CompiledTopic,
    addedAt: row.added_at,
    retiredAt: row.retired_at,
  }));
}

/**
 * Retires the topic `url` (every version) or `url|version` (that one): no new
 * subscriptions on it; those that exist keep working. The canonicals retired
 * now (none when they were retired already or never added).
 */
export async function retireTopic(db: Db, canonical: string): Promise<string[]> {
  const { url, version } = parseCanonical(canonical);
  const rows = await db
    .updateTable('webhook.subscription_topics')
    .set({ status: 'retired', retired_at: new Date() })
    .where('url', '=', url)
    .where('status', '=', 'active')
    .$if(version !== undefined, (query) => query.where('version', '=', version!))
    .returning(['url', 'version'])
    .execute();
  return rows.map((row) => canonicalOf(row.url, row.version));
}

/**
 * The canonicals a subscription may name, for the CapabilityStatement: each
 * active topic's URL (its newest version), and `url|version` for each
 * active version.
 */
export async function activeTopicCanonicals(db: Db): Promise<string[]> {
  const rows = await db
    .selectFrom('webhook.subscription_topics')
    .select(['url', 'version'])
    .where('status', '=', 'active')
    .orderBy('url')
    .orderBy('added_at')
    .execute();
  return [...new Set(rows.flatMap((row) => (row.version === null ? [row.url] : [row.url, canonicalOf(row.url, row.version)])))];
}

/** A topic as a subscription refers to it. */
export type TopicReference = { id: string; url: string; version: string | null; status: 'active' | 'retired'; compiled: CompiledTopic };

/**
 * The topic a subscription's criteria names: `url|version` that version,
 * `url` alone its newest active version (else its newest, retired). Undefined
 * when the service has no such topic.
 */
export async function findTopic(db: Db, canonical: string): Promise<TopicReference | undefined> {
  const { url, version } = parseCanonical(canonical);
  const row = await db
    .selectFrom('webhook.subscription_topics')
    .select(['id', 'url', 'version', 'status', 'compiled'])
    .where('url', '=', url)
    .$if(version !== undefined, (query) => query.where('version', '=', version!))
    .orderBy(sql`status = 'active'`, 'desc')
    .orderBy('added_at', 'desc')
    .orderBy('id', 'desc')
    .executeTakeFirst();
  return row === undefined ? undefined : { ...row, id: String(row.id), compiled: row.compiled as CompiledTopic };
}

/** `url|version`, or the URL alone for a topic without a version. */
export function canonicalOf(url: string, version: string | null): string {
  return version === null ? url : `${url}|${version}`;
}

/** A canonical reference: `url` or `url|version`. */
export function parseCanonical(canonical: string): { url: string; version: string | undefined } {
  const bar = canonical.lastIndexOf('|');
  return bar === -1 ? { url: canonical, version: undefined } : { url: canonical.slice(0, bar), version: canonical.slice(bar + 1) };
}

/** Equal as JSON values (jsonb does not keep key order). */
function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));
}

function sorted(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sorted);
  if (value !== null && typeof value === 'object')
    return Object.fromEntries(
      Object.entries(value)
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([key, item]) => [key, sorted(item)]),
    );
  return value;
}
