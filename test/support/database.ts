import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { connectDatabase, type DatabaseHandle } from '../../src/db/database.ts';
import type { SubscriptionStatus } from '../../src/db/schema.ts';
import { compileCriteria } from '../../src/search/criteria.ts';
import { databaseUrl, withAdmin } from './global-setup.ts';

export type TestDatabase = DatabaseHandle & { url: string; drop(): Promise<void> };

/** A fresh, migrated database of its own (a copy of the suite's template), dropped by drop(). */
export async function createTestDatabase(): Promise<TestDatabase> {
  const adminUrl = inject('adminUrl');
  const name = `fhir_webhooks_test_${randomBytes(6).toString('hex')}`;
  await withAdmin(adminUrl, (admin) => admin.query(`CREATE DATABASE ${name} TEMPLATE ${inject('templateDatabase')}`));
  const url = databaseUrl(adminUrl, name);
  const handle = connectDatabase(url, () => undefined);
  return {
    ...handle,
    url,
    drop: async () => {
      await handle.close();
      await withAdmin(adminUrl, (admin) => admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    },
  };
}

/**
 * A classic subscription stored as the API would store it, without a handshake (its endpoint and
 * secrets unused: the triggers and claims do not read them); its id.
 */
export async function storeClassicSubscription(pool: TestDatabase['pool'], criteria: string, status: SubscriptionStatus = 'active'): Promise<string> {
  const compiled = compileCriteria(criteria);
  const { rows } = await pool.query<{ id: string }>(
    `INSERT INTO webhook.subscriptions (status, criteria, resource_type, compiled_criteria, match, match_deleted, endpoint,
       headers_encrypted, signing_secret_encrypted, secret_is_generated, reason, ended_at)
     VALUES ($1::webhook.subscription_status, $2, $3, $4, $5, $6, 'https://receiver.example.org/', '\\x00', '\\x00', true, '-', CASE WHEN $1::text = 'off' THEN now() END)
     RETURNING id`,
    [status, criteria, compiled.resourceType, JSON.stringify(compiled), compiled.match, compiled.matchDeleted],
  );
  return rows[0]!.id;
}

/**
 * An active topic-based subscription on the topic at `topicUrl`, stored as the API would store one after its
 * handshake (its endpoint and secrets unused), with `topicFilter` its compiled filters per resource type; its id.
 */
export async function storeTopicSubscription(pool: TestDatabase['pool'], topicUrl: string, topicFilter: string | null = null): Promise<string> {
  const { rows } = await pool.query<{ id: string }>(
    `INSERT INTO webhook.subscriptions (status, criteria, topic_id, topic_filter, payload_content, compiled_criteria, endpoint, headers_encrypted, signing_secret_encrypted, secret_is_generated, reason)
     SELECT 'active', url, id, $2, 'id-only', '{}', 'https://receiver.example.org/', '\\x00', '\\x00', true, '-' FROM webhook.subscription_topics WHERE url = $1
     RETURNING id`,
    [topicUrl, topicFilter],
  );
  return rows[0]!.id;
}
