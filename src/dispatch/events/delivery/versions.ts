import { sql } from 'kysely';
import type { Db } from '../../../db/database.ts';
import type { FhirResource } from '../../../db/schema.ts';
import { eventKey, type VersionEvent } from '../../../db/jobs.ts';

/** Resource versions by eventKey, as fhir.resource_history holds them. */
export type Versions = Map<string, { content: FhirResource; lastUpdated: Date }>;

/**
 * The versions the events name, in one query (for all the claims of a
 * sender's claim at once): the keys as three arrays joined to the history's
 * primary key, each version once however many subscriptions its events are
 * for. Not a row-value IN list: PostgreSQL 15 planned 100 tuples of it at
 * 7 ms alone and 43 ms under a drain's concurrency, most of the drain's
 * time, where the join takes 3 ms; one statement text, whatever the count.
 */
export async function loadVersions(db: Db, events: VersionEvent[]): Promise<Versions> {
  if (events.length === 0) return new Map();
  const { rows } = await sql<{ resource_type: string; id: string; version_id: number; content: FhirResource; last_updated: Date }>`
    SELECT h.resource_type, h.id, h.version_id, h.content, h.last_updated
    FROM (SELECT DISTINCT *
          FROM unnest(${events.map((event) => event.resourceType)}::text[], ${events.map((event) => event.resourceId)}::text[],
                      ${events.map((event) => event.versionId)}::int[])
            AS key (resource_type, id, version_id)) wanted
    JOIN fhir.resource_history h USING (resource_type, id, version_id)`.execute(db);
  return new Map(
    rows.map((row) => [
      eventKey({ resourceType: row.resource_type, resourceId: row.id, versionId: row.version_id }),
      { content: row.content, lastUpdated: row.last_updated },
    ]),
  );
}

/**
 * The versions of these events, out of versions loaded for more (a sender's
 * claim of several subscriptions, read in one query): each batch keeps only
 * its own, so that once it is sent they can be collected, while the other
 * subscriptions of its claim are still being sent to. A version several
 * batches name is held once, by all of them.
 */
export function versionsOf(events: VersionEvent[], loaded: Versions): Versions {
  const versions: Versions = new Map();
  for (const event of events) {
    const key = eventKey(event);
    const version = loaded.get(key);
    if (version !== undefined) versions.set(key, version);
  }
  return versions;
}
