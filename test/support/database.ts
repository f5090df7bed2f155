import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { connectDatabase, type DatabaseHandle } from '../../src/db/database.ts';
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
