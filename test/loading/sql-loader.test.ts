import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { sql } from 'kysely';
import { from as copyFrom } from 'pg-copy-streams';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { childEnvironment, runCommand } from '../support/commands.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

type HistoryRow = { version_id: number; is_deletion: boolean; content: { meta: { versionId: string; lastUpdated: string } } };

async function historyOf(type: string, id: string): Promise<HistoryRow[]> {
  const { rows } = await t.database.pool.query<HistoryRow>(
    'SELECT version_id, is_deletion, content FROM fhir.resource_history WHERE resource_type = $1 AND id = $2 ORDER BY version_id',
    [type, id],
  );
  return rows;
}

describe('a batch loader writing fhir.resources with plain SQL', () => {
  it('INSERT with only content gets an id, versionId, lastUpdated and a history row, visible through the API', async () => {
    const participant = [{ actor: { reference: 'Patient/p1' }, status: 'accepted' }];
    const { rows } = await t.database.pool.query<{ id: string }>(`INSERT INTO fhir.resources (content) VALUES ($1), ($2) RETURNING id`, [
      { resourceType: 'Appointment', status: 'booked', start: '2026-03-02T09:00:00Z', end: '2026-03-02T09:30:00Z', participant },
      { resourceType: 'Appointment', id: 'appt-1', status: 'proposed', participant },
    ]);
    expect(rows[1]?.id).toBe('appt-1');
    const generated = rows[0]!.id;
    const read = await t.fhir('GET', `/Appointment/${generated}`);
    expect(read.statusCode).toBe(200);
    expect(read.json()).toMatchObject({ id: generated, status: 'booked', meta: { versionId: '1' } });
    expect(read.json().meta.lastUpdated).toMatch(/\.\d{6}Z$/);
    expect(await historyOf('Appointment', generated)).toHaveLength(1);
  });

  it('COPY FROM STDIN is versioned like INSERT', async () => {
    const client = await t.database.pool.connect();
    try {
      const lines = Array.from({ length: 50 }, (_, n) => JSON.stringify({ resourceType: 'Patient', id: `copied-${n + 1}` }));
      // One jsonb value per line in COPY's text format (no tabs or backslashes in these values).
      await pipeline(Readable.from([lines.join('\n') + '\n']), client.query(copyFrom('COPY fhir.resources (content) FROM STDIN')));
    } finally {
      client.release();
    }
    const { rows } = await t.database.pool.query(`SELECT count(*)::int AS n FROM fhir.resource_history WHERE id LIKE 'copied-%' AND version_id = 1`);
    expect(rows[0].n).toBe(50);
    expect((await t.fhir('GET', '/Patient/copied-7')).json().meta.versionId).toBe('1');
  });

  it('UPDATE bumps the version and DELETE records a deletion version', async () => {
    await t.database.pool.query(`INSERT INTO fhir.resources (content) VALUES ('{"resourceType":"Patient","id":"sql-1"}')`);
    await t.database.pool.query(`UPDATE fhir.resources SET content = content || '{"active":true}' WHERE resource_type = 'Patient' AND id = 'sql-1'`);
    await t.database.pool.query(`DELETE FROM fhir.resources WHERE resource_type = 'Patient' AND id = 'sql-1'`);

    const history = await historyOf('Patient', 'sql-1');
    expect(history.map((row) => [row.version_id, row.is_deletion])).toEqual([
      [1, false],
      [2, false],
      [3, true],
    ]);
    expect(history[2]!.content.meta.versionId).toBe('3');
    expect((await t.fhir('GET', '/Patient/sql-1')).statusCode).toBe(410);
    expect((await t.fhir('GET', '/Patient/sql-1/_history/2')).json()).toMatchObject({ active: true, meta: { versionId: '2' } });
  });

  it('INSERT ... ON CONFLICT DO UPDATE (an upsert) makes a new version', async () => {
    const upsert = `INSERT INTO fhir.resources (content) VALUES ($1)
      ON CONFLICT (resource_type, id) DO UPDATE SET content = excluded.content RETURNING version_id`;
    await t.database.pool.query(upsert, [{ resourceType: 'Patient', id: 'upserted', gender: 'other' }]);
    const { rows } = await t.database.pool.query(upsert, [{ resourceType: 'Patient', id: 'upserted', gender: 'female' }]);
    expect(rows[0].version_id).toBe(2);
  });

  it('a version number written by the loader is ignored, and a change of id is refused', async () => {
    await t.database.pool.query(`INSERT INTO fhir.resources (content) VALUES ('{"resourceType":"Patient","id":"fixed","meta":{"versionId":"99"}}')`);
    expect((await t.fhir('GET', '/Patient/fixed')).json().meta.versionId).toBe('1');
    await expect(t.database.pool.query(`UPDATE fhir.resources SET id = 'other' WHERE id = 'fixed'`)).rejects.toThrow(/cannot change its type or id/);
    await expect(t.database.pool.query(`INSERT INTO fhir.resources (content) VALUES ('{"resourceType":"Patient","id":"bad id!"}')`)).rejects.toThrow(
      /resources_id_is_a_fhir_id/,
    );
  });

  it('a rolled-back transaction leaves neither a resource nor history', async () => {
    await t.database.db
      .transaction()
      .execute(async (transaction) => {
        await sql`INSERT INTO fhir.resources (content) VALUES ('{"resourceType":"Patient","id":"rolled-back"}')`.execute(transaction);
        throw new Error('abort');
      })
      .catch(() => undefined);
    expect(await historyOf('Patient', 'rolled-back')).toEqual([]);
    expect((await t.fhir('GET', '/Patient/rolled-back')).statusCode).toBe(404);
  });
});

describe("docs/loading.md's \\copy recipe", () => {
  it('loads NDJSON lines holding escapes, quotes, tabs and non-ASCII as they are', { timeout: 60_000 }, async () => {
    const block = /## Plain SQL[\s\S]*?```sh\n([\s\S]*?)```/.exec(readFileSync('docs/loading.md', 'utf8'))?.[1];
    expect(block).toContain("\\copy fhir.resources (content) FROM 'appointments.ndjson'");
    const folder = mkdtempSync(path.join(tmpdir(), 'copy-recipe-'));
    try {
      const resources = [
        { resourceType: 'Patient', id: 'copy-escapes', name: [{ text: 'a "quoted" name,\nwith a line break and a back\\slash' }] },
        { resourceType: 'Patient', id: 'copy-quotes', name: [{ family: "O'Brien", given: ['Zoë', 'Łukasz', '李'] }] },
        { resourceType: 'Patient', id: 'copy-tab', name: [{ text: 'a\ttab inside' }] },
      ];
      // JSON text may also hold raw tabs between its tokens, and non-ASCII as it is.
      const lines = [...resources.map((resource) => JSON.stringify(resource)), '{"resourceType":\t"Patient", "id": "copy-raw-tab", "active": true}'];
      const file = path.join(folder, 'appointments.ndjson');
      writeFileSync(file, lines.join('\n') + '\n');
      // As written, but for the file's folder: the recipe's relative path is the project folder's.
      const run = await runCommand(
        'bash',
        ['-e', '-c', block!.replace("'appointments.ndjson'", `'${file}'`)],
        childEnvironment({ DATABASE_URL: t.database.url, LOG_LEVEL: 'warn' }),
      );
      expect(run.exitCode, run.output).toBe(0);
      expect(run.output).toContain('COPY 4');
      for (const resource of resources) {
        const read = await t.fhir('GET', `/Patient/${resource.id}`);
        expect(read.json()).toMatchObject(resource);
      }
      expect((await t.fhir('GET', '/Patient/copy-raw-tab')).json()).toMatchObject({ active: true });
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });
});
