import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Logger, runMigrations as runGraphileWorkerMigrations } from 'graphile-worker';
import { runner } from 'node-pg-migrate';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { fhirBasePath } from '../../src/api/app.ts';
import { connectDatabase, type DatabaseHandle } from '../../src/db/database.ts';
import { applyMigrations } from '../../src/db/migrations.ts';
import { resourceTypes } from '../../src/fhir/definitions.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { databaseUrl, withAdmin } from '../support/global-setup.ts';
import { subscribe } from '../support/subscriptions.ts';

/**
 * Issue 27, item 4: fhir.resources refuses, from plain SQL, the resource types
 * the API refuses (a type outside R4, and Subscription), naming the type.
 */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

/** The error a statement fails with (it must fail). */
async function refusalOf(statement: Promise<unknown>): Promise<pg.DatabaseError> {
  const error: unknown = await statement.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error).toBeInstanceOf(pg.DatabaseError);
  return error as pg.DatabaseError;
}

async function resourceCount(pool: pg.Pool, where: string): Promise<{ current: number; versions: number }> {
  const { rows } = await pool.query<{ current: number; versions: number }>(
    `SELECT (SELECT count(*)::int FROM fhir.resources WHERE ${where}) AS current,
            (SELECT count(*)::int FROM fhir.resource_history WHERE ${where}) AS versions`,
  );
  return rows[0]!;
}

describe('fhir.resources written with plain SQL', () => {
  it("holds the API's list of R4 resource types, and takes every one of them but Subscription", async () => {
    const { rows } = await t.database.pool.query<{ type: string }>('SELECT unnest(fhir.r4_resource_types()) AS type');
    expect(rows.map((row) => row.type)).toEqual([...resourceTypes].sort());

    const storable = [...resourceTypes].filter((type) => type !== 'Subscription');
    const written = await t.database.pool.query(
      `INSERT INTO fhir.resources (content) SELECT jsonb_build_object('resourceType', type, 'id', 'each-type') FROM unnest($1::text[]) type`,
      [storable],
    );
    expect(written.rowCount).toBe(storable.length);
  });

  it('refuses a type outside R4, naming it, and an UPDATE cannot make one', async () => {
    for (const type of ['Pateint', 'patient', 'SubscriptionTopic']) {
      const refusal = await refusalOf(t.database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [{ resourceType: type, id: 'typo' }]));
      expect(refusal.code).toBe('23514');
      expect(refusal.message).toBe(`fhir.resources refuses resourceType '${type}': not a FHIR R4 resource type`);
      expect(refusal.hint).toContain('SELECT unnest(fhir.r4_resource_types())');
    }
    expect(await resourceCount(t.database.pool, `id = 'typo'`)).toEqual({ current: 0, versions: 0 });

    await t.database.pool.query(`INSERT INTO fhir.resources (content) VALUES ('{"resourceType": "Patient", "id": "retyped"}')`);
    const retyped = await refusalOf(
      t.database.pool.query(
        `UPDATE fhir.resources SET content = jsonb_set(content, '{resourceType}', '"Pateint"') WHERE resource_type = 'Patient' AND id = 'retyped'`,
      ),
    );
    expect(retyped.constraint).toBe('resources_content_is_the_row');
  });

  it('refuses a Subscription, pointing to the API, where subscriptions are still created', async () => {
    const refusal = await refusalOf(
      t.database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [
        {
          resourceType: 'Subscription',
          status: 'active',
          criteria: 'Patient?active=true',
          channel: { type: 'rest-hook', endpoint: 'https://hooks.example.org/fhir' },
        },
      ]),
    );
    expect(refusal.code).toBe('23514');
    expect(refusal.message).toMatch(/^fhir\.resources refuses resourceType 'Subscription': subscriptions are created through the API/);
    expect(refusal.hint).toContain(`POST the Subscription to the service at ${fhirBasePath}/Subscription`);

    const { id } = await subscribe(t, 'Patient?active=true', 'https://hooks.example.org/fhir');
    expect((await t.fhir('GET', `/Subscription/${id}`)).statusCode).toBe(200);
    expect(await resourceCount(t.database.pool, `resource_type = 'Subscription'`)).toEqual({ current: 0, versions: 0 });
  });

  it('refuses a whole multi-row INSERT or COPY for one row of a refused type', async () => {
    const rows = [
      { resourceType: 'Patient', id: 'batch-1' },
      { resourceType: 'Pateint', id: 'batch-2' },
      { resourceType: 'Patient', id: 'batch-3' },
    ];
    const inserted = await refusalOf(t.database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2), ($3)`, rows));
    expect(inserted.message).toContain(`resourceType 'Pateint'`);

    const client = await t.database.pool.connect();
    try {
      const copy = pipeline(
        Readable.from([rows.map((row) => JSON.stringify(row)).join('\n') + '\n']),
        client.query(copyFrom('COPY fhir.resources (content) FROM STDIN')),
      );
      const copied = await refusalOf(copy);
      expect(copied.message).toContain(`resourceType 'Pateint'`);
      // PostgreSQL names the COPY's line.
      expect(copied.where).toContain('line 2');
    } finally {
      client.release();
    }
    expect(await resourceCount(t.database.pool, `id LIKE 'batch-%'`)).toEqual({ current: 0, versions: 0 });
  });
});

describe('upgrading a database that holds rows of types the table now refuses', () => {
  const name = `fhir_webhooks_types_${randomBytes(6).toString('hex')}`;
  let handle: DatabaseHandle;
  beforeAll(async () => {
    await withAdmin(inject('adminUrl'), (admin) => admin.query(`CREATE DATABASE ${name}`));
    handle = connectDatabase(databaseUrl(inject('adminUrl'), name), () => undefined);
  });
  afterAll(async () => {
    await handle.close();
    await withAdmin(inject('adminUrl'), (admin) => admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
  });

  it("keeps them, readable and deletable but not updatable, refuses new ones, and the docs' recipe puts them right", { timeout: 60_000 }, async () => {
    // The schema before the check: the migrations before 0027, whose trigger took any type.
    const migrationsDir = path.resolve(import.meta.dirname, '../../db/migrations');
    const before = readdirSync(migrationsDir)
      .filter((file) => file.endsWith('.sql'))
      .sort()
      .findIndex((file) => file.startsWith('0027_'));
    expect(before).toBe(26);
    await runGraphileWorkerMigrations({ pgPool: handle.pool, logger: new Logger(() => () => undefined) });
    const client = await handle.pool.connect();
    try {
      await runner({ dbClient: client, dir: migrationsDir, direction: 'up', migrationsTable: 'pgmigrations', count: before, log: () => undefined });
    } finally {
      client.release();
    }
    await handle.pool.query(
      `INSERT INTO fhir.resources (content) VALUES ('{"resourceType": "Pateint", "id": "old-typo"}'), ('{"resourceType": "Subscription", "id": "old-subscription"}')`,
    );

    expect(await applyMigrations(handle.pool)).toContain('0027_resource_types_checked_on_write');

    const updated = await refusalOf(handle.pool.query(`UPDATE fhir.resources SET content = content || '{"active": true}' WHERE id = 'old-typo'`));
    expect(updated.message).toContain(`resourceType 'Pateint'`);
    await refusalOf(handle.pool.query(`INSERT INTO fhir.resources (content) VALUES ('{"resourceType": "Pateint", "id": "new-typo"}')`));

    // docs/resource-store.md's recipe finds them and puts the mistyped one right.
    const recipe = /To find them[\s\S]*?```sql\n([\s\S]*?)```/.exec(readFileSync('docs/resource-store.md', 'utf8'))?.[1];
    const [found, retyped] = (await handle.pool.query(recipe!)) as unknown as [pg.QueryResult<{ resource_type: string; count: string }>, pg.QueryResult];
    expect(found.rows.map((row) => row.resource_type).sort()).toEqual(['Pateint', 'Subscription']);
    expect(retyped.rowCount).toBe(1);
    expect((await handle.pool.query(`SELECT resource_type FROM fhir.resources WHERE id = 'old-typo'`)).rows).toEqual([{ resource_type: 'Patient' }]);

    await handle.pool.query(`DELETE FROM fhir.resources WHERE resource_type = 'Subscription' AND id = 'old-subscription'`);
    expect(await resourceCount(handle.pool, `id = 'old-subscription'`)).toEqual({ current: 0, versions: 2 });
  });
});
