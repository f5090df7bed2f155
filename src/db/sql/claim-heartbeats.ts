import { sql } from 'kysely';
import type { Db } from '../database.ts';

/** A heartbeat due: a subscription claimed by this sender, with its latest event number. */
export type DueHeartbeat = { subscriptionId: string; subscriptionVersion: number; lastEventNumber: number };

/** Claims the heartbeats due, up to `maxSubscriptions` (db/functions/webhook.claim_heartbeats.sql). */
export async function claimHeartbeats(db: Db, senderId: string, maxSubscriptions: number): Promise<DueHeartbeat[]> {
  const { rows } = await sql<{ subscription_id: string; subscription_version: number; last_event_number: string }>`
    SELECT * FROM webhook.claim_heartbeats(${senderId}, ${maxSubscriptions})`.execute(db);
  return rows.map((row) => ({
    subscriptionId: row.subscription_id,
    subscriptionVersion: row.subscription_version,
    lastEventNumber: Number(row.last_event_number),
  }));
}
