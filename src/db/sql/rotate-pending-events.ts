import { sql } from 'kysely';
import type { Db } from '../database.ts';

/**
 * Empties the pending set's older generation by TRUNCATE, when `everySeconds`
 * have passed since the last rotation of any process and it holds at most
 * `maxMoved` events, which move to the current one
 * (db/functions/webhook.rotate_pending_events.sql). True when it rotated.
 */
export async function rotatePendingEvents(db: Db, everySeconds: number, maxMoved: number): Promise<boolean> {
  const { rows } = await sql<{ rotated: boolean }>`
    SELECT webhook.rotate_pending_events(make_interval(secs => ${everySeconds}), ${maxMoved}) AS rotated`.execute(db);
  return rows[0]?.rotated === true;
}
