import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { schemaOfFreshDatabase } from '../../scripts/support/fresh-schema.ts';

describe('db/schema.sql', () => {
  it('is the schema that the migrations and functions make (npm run db:schema writes it)', { timeout: 120_000 }, async () => {
    const committed = await readFile(path.resolve(import.meta.dirname, '../../db/schema.sql'), 'utf8');
    const current = await schemaOfFreshDatabase();
    expect(current).toContain('CREATE OR REPLACE FUNCTION webhook.record_subscription_events()');
    expect(committed, 'db/schema.sql is out of date: run npm run db:schema and commit it').toBe(current);
  });
});
