import { sql } from 'kysely';
import type { Db } from '../database.ts';

/** An event a resend queued again, as webhook.resend_events returns it. */
export type RequeuedEventRow = { event_number: string | null; resource_type: string; resource_id: string; version_id: number };

/**
 * Makes the settled events `eventIds` of an active subscription pending again,
 * with their numbers and versions, and wakes the senders
 * (db/functions/webhook.resend_events.sql); returns the events queued, in log
 * order.
 */
export async function requeueEvents(db: Db, subscriptionId: string, eventIds: string[]): Promise<RequeuedEventRow[]> {
  const { rows } = await sql<RequeuedEventRow>`SELECT * FROM webhook.resend_events(${subscriptionId}, ${eventIds}::bigint[])`.execute(db);
  return rows;
}
