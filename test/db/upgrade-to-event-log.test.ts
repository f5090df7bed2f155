import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { Logger, runMigrations as runGraphileWorkerMigrations } from 'graphile-worker';
import { runner } from 'node-pg-migrate';
import type pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { connectDatabase, type DatabaseHandle } from '../../src/db/database.ts';
import { applyMigrations } from '../../src/db/migrations.ts';
import { startWorkers } from '../../src/dispatch/worker.ts';
import { createSecretBox } from '../../src/subscriptions/secrets.ts';
import { compileCriteria } from '../../src/search/criteria.ts';
import { baseUrl, testSecretsKey } from '../support/app.ts';
import { databaseUrl, withAdmin } from '../support/global-setup.ts';
import { startReceiver, waitFor, type Receiver } from '../support/receiver.ts';

/**
 * Upgrade without loss (issue 17): a database of the schema before the event
 * log (migration 0017) holding notification jobs in every state its workers
 * left them — waiting, running when their worker died, a retry scheduled for
 * later, and the single-event form of before 0008 — is upgraded, and the new
 * workers deliver every event exactly once, from the log.
 *
 * The jobs are made as the old version made them: by its notification trigger
 * (the one migrations 0003 to 0017 build) and graphile-worker's add_job. Only
 * "running" needs graphile-worker's private table, as only its worker set it.
 */
let name: string;
let database: DatabaseHandle;
let receiver: Receiver;
beforeAll(async () => {
  name = `fhir_webhooks_upgrade_${randomBytes(6).toString('hex')}`;
  await withAdmin(inject('adminUrl'), (admin) => admin.query(`CREATE DATABASE ${name}`));
  database = connectDatabase(databaseUrl(inject('adminUrl'), name), () => undefined);
  receiver = await startReceiver();
});
afterAll(async () => {
  await receiver.close();
  await database.close();
  await withAdmin(inject('adminUrl'), (admin) => admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
});

/** The schema as the version before the event log left it: graphile-worker's, and our migrations up to 0017. */
async function migrateTo0017(pool: pg.Pool): Promise<void> {
  await runGraphileWorkerMigrations({ pgPool: pool, logger: new Logger(() => () => undefined) });
  const client = await pool.connect();
  try {
    await runner({
      dbClient: client,
      dir: path.resolve(import.meta.dirname, '../../db/migrations'),
      direction: 'up',
      migrationsTable: 'pgmigrations',
      count: 17,
      log: () => undefined,
    });
  } finally {
    client.release();
  }
}

describe('upgrading a database with notification jobs to the event log', () => {
  it('moves waiting, running and scheduled notification jobs into the log and delivers every event once', { timeout: 90_000 }, async () => {
    await migrateTo0017(database.pool);
    const { rows: applied } = await database.pool.query<{ name: string }>('SELECT name FROM pgmigrations ORDER BY name DESC LIMIT 1');
    expect(applied[0]!.name).toBe('0017_notification_trigger_without_jit');

    // An active subscription, as the old version left it (its handshake done): the row its API wrote, in the schema of 0017.
    const box = createSecretBox(testSecretsKey);
    const compiled = compileCriteria('Patient?active=true');
    const { rows: created } = await database.pool.query<{ id: string }>(
      `INSERT INTO webhook.subscriptions (status, criteria, resource_type, compiled_criteria, match, match_deleted, endpoint, payload, headers_encrypted, signing_secret_encrypted, secret_is_generated, reason)
       VALUES ('active', 'Patient?active=true', 'Patient', $1, $2, $3, $4, 'application/fhir+json', $5, $6, false, 'upgrade') RETURNING id`,
      [JSON.stringify(compiled), compiled.match, compiled.matchDeleted, receiver.url, box.seal(JSON.stringify(['secret: s3cret'])), box.seal('s3cret')],
    );
    const subscriptionId = created[0]!.id;
    await database.pool.query(`SELECT graphile_worker.complete_jobs(array(SELECT id FROM graphile_worker.jobs))`);

    // Waiting: two statements of the old trigger, a batch of three and a batch of one.
    const patient = (id: string) => JSON.stringify({ resourceType: 'Patient', id, active: true });
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2), ($3)`, [
      patient('waiting-1'),
      patient('waiting-2'),
      patient('waiting-3'),
    ]);
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [patient('running-1')]);
    // Running when its worker died: locked by a pool that is gone, two minutes ago.
    await database.pool.query(
      `UPDATE graphile_worker._private_jobs SET locked_by = 'worker-of-the-old-version', locked_at = now() - interval '2 minutes'
       WHERE id = (SELECT id FROM graphile_worker.jobs WHERE task_identifier = 'notification_delivery' ORDER BY id DESC LIMIT 1)`,
    );
    // A retry the old version scheduled (its second attempt, due in 2 s), and the single-event form of before 0008.
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1), ($2)`, [patient('retry-1'), patient('single-1')]);
    await database.pool.query(
      `SELECT graphile_worker.complete_jobs(array(SELECT id FROM graphile_worker.jobs WHERE task_identifier = 'notification_delivery' AND locked_by IS NULL AND created_at = (SELECT max(created_at) FROM graphile_worker.jobs)))`,
    );
    await database.pool.query(`SELECT graphile_worker.add_job('notification_delivery', $1::json, queue_name => $2, run_at => now() + interval '2 seconds')`, [
      JSON.stringify({ subscriptionId, events: [{ resourceType: 'Patient', resourceId: 'retry-1', versionId: 1, deleted: false, attempt: 2 }] }),
      `subscription:${subscriptionId}`,
    ]);
    await database.pool.query(`SELECT graphile_worker.add_job('notification_delivery', $1::json)`, [
      JSON.stringify({ subscriptionId, resourceType: 'Patient', resourceId: 'single-1', versionId: 1, deleted: false }),
    ]);
    const { rows: before } = await database.pool.query<{ locked: boolean; later: boolean }>(
      `SELECT locked_by IS NOT NULL AS locked, run_at > now() AS later FROM graphile_worker.jobs WHERE task_identifier = 'notification_delivery' ORDER BY id`,
    );
    expect(before).toEqual([
      { locked: false, later: false },
      { locked: true, later: false },
      { locked: false, later: true },
      { locked: false, later: false },
    ]);

    // The upgrade, then the new workers.
    await applyMigrations(database.pool);
    // A write after the upgrade goes straight into the log.
    await database.pool.query(`INSERT INTO fhir.resources (content) VALUES ($1)`, [patient('after-1')]);
    const config = loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
    const workers = await startWorkers(config, database, testSecretsKey, pino({ level: 'silent' }));
    try {
      const expected = ['waiting-1', 'waiting-2', 'waiting-3', 'running-1', 'retry-1', 'single-1', 'after-1'];
      await waitFor(() => (receiver.calls.length >= expected.length ? true : undefined), 30_000, `${expected.length} deliveries`);
      await waitFor(
        async () => {
          const { rows } = await database.pool.query<{ left: number }>(
            `SELECT (SELECT count(*) FROM graphile_worker.jobs) + (SELECT count(*) FROM webhook.subscription_events WHERE status = 'pending')::int AS left`,
          );
          return Number(rows[0]!.left) === 0 ? true : undefined;
        },
        30_000,
        'nothing left to do',
      );
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(receiver.calls.map((call) => call.json.id).sort()).toEqual([...expected].sort());

      // Every event in the log, numbered 1 to 7; the retry kept its count of calls made.
      const { rows: events } = await database.pool.query(
        `SELECT resource_id, status, attempts, event_number::int FROM webhook.subscription_events WHERE subscription_id = $1 ORDER BY event_number`,
        [subscriptionId],
      );
      expect(events.map((event) => event.status)).toEqual(expected.map(() => 'delivered'));
      expect(events.map((event) => event.event_number)).toEqual([1, 2, 3, 4, 5, 6, 7]);
      expect(events.find((event) => event.resource_id === 'retry-1')).toMatchObject({ attempts: 2 });
      const { rows: attempts } = await database.pool.query(
        `SELECT resource_id, attempt, event_number::int FROM webhook.delivery_attempts WHERE kind = 'notification' AND resource_id = 'retry-1'`,
      );
      expect(attempts).toEqual([{ resource_id: 'retry-1', attempt: 2, event_number: events.find((event) => event.resource_id === 'retry-1')!.event_number }]);
    } finally {
      await workers.stop();
    }
  });
});
