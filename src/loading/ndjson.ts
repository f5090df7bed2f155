import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { createGunzip } from 'node:zlib';
import { sql } from 'kysely';
import type { Db } from '../db/database.ts';
import { fhirIdPattern, isResourceType } from '../fhir/definitions.ts';
import { unstorableString } from '../fhir/storable-text.ts';

/**
 * The bulk loader for FHIR Bulk Data NDJSON files (one resource per line, any
 * mix of types; `.ndjson` or `.ndjson.gz`). Each line is checked; the good
 * ones are written in chunks, one transaction each, through the same
 * `fhir.resources` triggers as every other write, so that a committed chunk
 * notifies its subscribers and a failed one notifies nobody. A resource with
 * an id is created or updated (a new version), as a FHIR update would; one
 * without gets a UUID.
 */

export type LoadOptions = {
  /** Resources per transaction. */
  chunkSize: number;
  /** Check every line, write nothing. */
  dryRun: boolean;
  /** Called after each chunk (and at the end). */
  onProgress?: (progress: LoadProgress) => void;
};

export type LoadProgress = { lines: number; loaded: number; refused: number; bytesRead: number; totalBytes: number };

/** What was not loaded, and why: a line, or a chunk the database refused (its resources, from line to lastLine). */
export type Refusal = { file: string; line: number; lastLine?: number; resources: number; reason: string };

/** `refused`: resources not loaded (a refused chunk counts all of its own). */
export type LoadSummary = { lines: number; loaded: number; refused: number; refusals: Refusal[]; seconds: number };

/**
 * Chunks written at once, each on its own connection: while PostgreSQL runs
 * one chunk's triggers (versions, history, notifications, the GIN index),
 * another is written. Measured with 100,000 resources on 2 cores: 14,000/s
 * one at a time, 25,000/s two at a time. Chunks may then commit out of file
 * order, except that a resource's versions always commit in line order.
 */
const maxWritesInFlight = 2;

/** Longer lines are refused (once read: a line is read whole): no resource in a bulk export is anywhere near. */
const maxLineBytes = 16 * 1024 * 1024;

/** A line's resource once checked. */
type Resource = Record<string, unknown> & { resourceType: string; id?: string };
type Line = { file: string; line: number; resource: Resource };

export async function loadNdjson(db: Db, files: string[], options: LoadOptions): Promise<LoadSummary> {
  const started = performance.now();
  const totalBytes = (await Promise.all(files.map((file) => stat(file)))).reduce((sum, info) => sum + info.size, 0);
  const progress: LoadProgress = { lines: 0, loaded: 0, refused: 0, bytesRead: 0, totalBytes };
  const refusals: Refusal[] = [];
  const refuse = (refusal: Refusal) => {
    refusals.push(refusal);
    progress.refused += refusal.resources;
  };
  let chunk: Line[] = [];
  let ids = new Set<string>();
  const write = async (lines: Line[]) => {
    if (!options.dryRun) {
      try {
        await writeChunk(db, lines);
      } catch (error) {
        const reason = `a chunk of ${lines.length} resources failed in the database and was rolled back: ${error instanceof Error ? error.message : String(error)}`;
        refuse({ file: lines[0]!.file, line: lines[0]!.line, lastLine: lines.at(-1)!.line, resources: lines.length, reason });
        options.onProgress?.(progress);
        return;
      }
    }
    progress.loaded += lines.length;
    options.onProgress?.(progress);
  };
  // Chunks in flight, each with the resources it writes.
  let inFlight: { done: Promise<void>; ids: Set<string> }[] = [];
  const flush = async () => {
    if (chunk.length === 0) return;
    const lines = chunk;
    const chunkIds = ids;
    chunk = [];
    ids = new Set();
    // A resource written by a chunk still in flight gets its next version only after that chunk commits.
    const overlapping = inFlight.some((other) => [...chunkIds].some((id) => other.ids.has(id)));
    if (overlapping || inFlight.length >= maxWritesInFlight) {
      await (overlapping ? Promise.all(inFlight.map((other) => other.done)) : inFlight[0]!.done);
    }
    const entry = { done: write(lines), ids: chunkIds };
    inFlight.push(entry);
    void entry.done.then(() => (inFlight = inFlight.filter((other) => other !== entry)));
  };

  let bytesBeforeFile = 0;
  for (const file of files) {
    const raw = createReadStream(file);
    // Progress in bytes of the file as stored (compressed or not): the only total known beforehand.
    raw.on('data', () => (progress.bytesRead = bytesBeforeFile + raw.bytesRead));
    const input = file.endsWith('.gz') ? raw.pipe(createGunzip()) : raw;
    let number = 0;
    for await (const text of createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY })) {
      number += 1;
      progress.lines += 1;
      if (text.trim() === '') continue;
      const checked = checkLine(text);
      if (typeof checked === 'string') {
        refuse({ file, line: number, resources: 1, reason: checked });
        continue;
      }
      // The same resource twice: its second version goes in the next transaction (one statement cannot write a row twice).
      const key = checked.id === undefined ? undefined : `${checked.resourceType}/${checked.id}`;
      if (key !== undefined && ids.has(key)) await flush();
      chunk.push({ file, line: number, resource: checked });
      if (key !== undefined) ids.add(key);
      if (chunk.length >= options.chunkSize) await flush();
    }
    await flush();
    await Promise.all(inFlight.map((other) => other.done));
    bytesBeforeFile += (await stat(file)).size;
    progress.bytesRead = bytesBeforeFile;
  }
  options.onProgress?.(progress);
  return { lines: progress.lines, loaded: progress.loaded, refused: progress.refused, refusals, seconds: (performance.now() - started) / 1000 };
}

/** A line's resource, or why it is refused. */
function checkLine(text: string): Resource | string {
  if (Buffer.byteLength(text) > maxLineBytes) return `longer than ${maxLineBytes / 1024 / 1024} MiB`;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return `not JSON: ${error instanceof Error ? error.message : String(error)}`;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'not a FHIR resource (a JSON object)';
  const resource = value as Record<string, unknown>;
  if (typeof resource.resourceType !== 'string') return 'no resourceType';
  if (!isResourceType(resource.resourceType)) return `unknown resourceType '${resource.resourceType}': not a FHIR R4 resource type`;
  if (resource.resourceType === 'Subscription')
    return 'a Subscription: subscriptions are created through the API (POST /fhir/resources/Subscription), not loaded';
  if (resource.id !== undefined && (typeof resource.id !== 'string' || !fhirIdPattern.test(resource.id))) {
    return `invalid id ${JSON.stringify(resource.id)}: FHIR ids are 1-64 characters of A-Z, a-z, 0-9, '-' and '.'`;
  }
  if (resource.meta !== undefined && (typeof resource.meta !== 'object' || resource.meta === null || Array.isArray(resource.meta)))
    return 'meta is not a JSON object';
  const unstorable = unstorableString(resource);
  if (unstorable !== undefined) return `holds ${unstorable}, which PostgreSQL cannot store`;
  return resource as Resource;
}

/**
 * One transaction, one statement: the rows' content only (the triggers set
 * ids, versions and lastUpdated, write the history and enqueue the
 * notifications, once for the whole statement).
 */
async function writeChunk(db: Db, lines: Line[]): Promise<void> {
  const contents = JSON.stringify(lines.map((line) => line.resource));
  await db.transaction().execute(async (transaction) => {
    // The pool's sessions are the API's, bounded for requests (30 s a statement, 5 s a lock wait);
    // a chunk may rightly take longer, or wait for a row an API write holds.
    await sql`SET LOCAL statement_timeout = 0`.execute(transaction);
    await sql`SET LOCAL lock_timeout = 0`.execute(transaction);
    await sql`
      INSERT INTO fhir.resources (content)
      SELECT value FROM jsonb_array_elements(${contents}::jsonb)
      ON CONFLICT (resource_type, id) DO UPDATE SET content = EXCLUDED.content`.execute(transaction);
  });
}
