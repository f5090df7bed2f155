import { sql, type RawBuilder } from 'kysely';
import type { Db } from '../database.ts';

/**
 * Whether a newer subscription exists for this one's criteria
 * (db/migrations/0005_superseded_subscriptions.sql;
 * db/functions/webhook.subscription_is_superseded.sql).
 */
export async function isSuperseded(db: Db, id: string): Promise<boolean> {
  const { rows } = await sql<{ superseded: boolean }>`SELECT ${subscriptionIsSuperseded(id)} AS superseded`.execute(db);
  return rows[0]?.superseded === true;
}

/** The same as an SQL expression, for a statement that acts only while the subscription is not superseded. */
export function subscriptionIsSuperseded(id: string): RawBuilder<boolean> {
  return sql<boolean>`webhook.subscription_is_superseded(${id})`;
}
