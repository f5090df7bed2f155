import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t.close());

describe('concurrent conditional updates', () => {
  it('of 50 concurrent If-Match updates of one version exactly one wins, the others are 412; and so on for each next version', async () => {
    await t.fhir('PUT', '/Patient/contended', { resourceType: 'Patient', id: 'contended', active: true });
    for (let version = 1; version <= 3; version++) {
      const responses = await Promise.all(
        Array.from({ length: 50 }, (_, writer) =>
          t.fhir(
            'PUT',
            '/Patient/contended',
            { resourceType: 'Patient', id: 'contended', name: [{ text: `writer ${writer}` }] },
            { 'if-match': `W/"${version}"` },
          ),
        ),
      );
      const statuses = responses.map((response) => response.statusCode);
      expect(
        statuses.filter((status) => status === 200),
        `version ${version}`,
      ).toHaveLength(1);
      expect(
        statuses.filter((status) => status === 412),
        `version ${version}`,
      ).toHaveLength(49);
      const winner = responses.find((response) => response.statusCode === 200)!.json();
      expect(winner.meta.versionId).toBe(String(version + 1));
      const stored = (await t.fhir('GET', '/Patient/contended')).json();
      expect(stored).toMatchObject({ meta: { versionId: String(version + 1) }, name: winner.name });
    }
    const { rows } = await t.database.pool.query(
      `SELECT count(*)::int AS versions FROM fhir.resource_history WHERE resource_type = 'Patient' AND id = 'contended'`,
    );
    expect(rows[0].versions).toBe(4);
  });
});
