import { sql, type Expression, type RawBuilder } from 'kysely';

/**
 * How long the events after a deactivation leave a subscription in error, by
 * its deactivations in a row (db/functions/webhook.reactivation_backoff.sql;
 * migration 0025), as an SQL expression: an interval.
 */
export function reactivationBackoff(deactivationsInARow: Expression<number>): RawBuilder<unknown> {
  return sql`webhook.reactivation_backoff(${deactivationsInARow})`;
}
