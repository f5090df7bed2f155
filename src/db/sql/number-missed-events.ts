import { sql } from 'kysely';
import type { Db } from '../database.ts';

/**
 * Numbers the events a topic-based subscription missed (in error, or
 * abandoned unsent), after the last number given, unless a sender holds it
 * (db/functions/webhook.number_missed_events.sql); returns the last number
 * given: its count of events.
 */
export async function numberMissedEvents(db: Db, subscriptionId: string): Promise<number> {
  const { rows } = await sql<{ last: string }>`SELECT webhook.number_missed_events(${subscriptionId}) AS last`.execute(db);
  return Number(rows[0]?.last ?? 0);
}
