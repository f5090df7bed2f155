import fhirpath from 'fhirpath';
import r4 from 'fhirpath/fhir-context/r4';
import type { TestDatabase } from './database.ts';

/**
 * The FHIRPath oracle of the compiled criteria (src/fhirpath/): fhirpath.js,
 * HL7's JavaScript engine with its R4 model, and the same decision the topic
 * trigger makes: a criteria fires exactly where its result is a single `true`;
 * an empty or false result, or an error the engine throws, does not fire.
 */

// fhirpath.js reads a date or time without an offset, and today(), in the process's time zone; the compiled SQL
// reads them in UTC (db/functions/fhirpath.date_time.sql), so the oracle evaluates in UTC too, wherever it runs.
process.env.TZ = 'UTC';

export type Version = Record<string, unknown> | null;
/** The version before a write and the version written (null: a create's previous, a delete's current). */
export type VersionPair = { previous: Version; current: Version };

/** fhirpath.js's decision for one write. */
export function fhirpathFires(expression: string, { previous, current }: VersionPair): boolean {
  try {
    const result = fhirpath.evaluate(current ?? {}, expression, { current: current ?? [], previous: previous ?? [] }, r4) as unknown[];
    return result.length === 1 && result[0] === true;
  } catch {
    return false;
  }
}

/** A compiled criteria's decisions for the pairs, in order, in one statement. */
export async function compiledDecisions(pool: TestDatabase['pool'], sql: string, pairs: VersionPair[]): Promise<boolean[]> {
  const { rows } = await pool.query<{ fires: boolean }>(
    `SELECT ${sql} AS fires
     FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS pairs(pair, place),
          LATERAL (SELECT nullif(pair -> 'previous', 'null') AS previous, nullif(pair -> 'current', 'null') AS current) versions
     ORDER BY place`,
    [JSON.stringify(pairs)],
  );
  return rows.map((row) => row.fires);
}
