import { sql, type Expression, type RawBuilder } from 'kysely';

/**
 * The SHA-256 of a criteria string, as the indexes of subscriptions by
 * criteria hold it (migrations 0011 and 0023), as an SQL expression: a bytea
 * (db/functions/webhook.criteria_digest.sql).
 */
export function criteriaDigest(criteria: Expression<string>): RawBuilder<Buffer> {
  return sql<Buffer>`webhook.criteria_digest(${criteria})`;
}
