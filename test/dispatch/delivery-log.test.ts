import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { closedAtFileEnd, stackWith } from '../support/dispatch-stack.ts';
import { waitFor } from '../support/receiver.ts';
import { attemptsOf, subscribe, untilStatus } from '../support/subscriptions.ts';

const { receiver } = closedAtFileEnd();

describe('delivery log', () => {
  const stack = stackWith(() => ({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_LOG_RETENTION_DAYS: '30' }));

  it('the cleanup job deletes the attempts, settled events and told deactivations older than the retention and the previous signing secrets past their overlap, and keeps the others', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Patient?active=true', endpoint.url);
    await untilStatus(t, id, 'active');
    const insert = (daysAgo: number, resourceId: string) =>
      t.database.pool.query(
        `INSERT INTO webhook.delivery_attempts (subscription_id, kind, resource_type, resource_id, version_id, attempt, started_at, duration_ms, http_status, outcome)
         VALUES ($1, 'notification', 'Patient', $2, 1, 1, now() - make_interval(days => $3), 12, 200, 'delivered')`,
        [id, resourceId, daysAgo],
      );
    await insert(40, 'old');
    await insert(29, 'recent');
    // Settled events go with the attempts; a pending one stays, however old (this one's subscription is gone, so no sender takes it).
    const event = (subscriptionId: string, writtenDaysAgo: number, settledDaysAgo: number | null, resourceId: string) =>
      t.database.pool.query(
        `INSERT INTO webhook.subscription_events (subscription_id, resource_type, resource_id, version_id, deleted, written_at, status, settled_at)
         VALUES ($1, 'Patient', $2, 1, false, now() - make_interval(days => $3), CASE WHEN $4::int IS NULL THEN 'pending' ELSE 'delivered' END, now() - make_interval(days => $4::int))`,
        [subscriptionId, resourceId, writtenDaysAgo, settledDaysAgo],
      );
    await event(id, 41, 40, 'old');
    await event(id, 29, 29, 'recent');
    await event(randomUUID(), 50, null, 'waiting');
    // A previous signing secret whose rotation overlap has ended is dropped; one still in its overlap stays.
    const { id: overlapping } = await subscribe(t, 'Patient?active=false', endpoint.url);
    const previousSecret = (subscriptionId: string, untilSecondsFromNow: number) =>
      t.database.pool.query(
        `UPDATE webhook.subscriptions SET previous_signing_secret_encrypted = '\\x00', previous_secret_until = now() + make_interval(secs => $2) WHERE id = $1`,
        [subscriptionId, untilSecondsFromNow],
      );
    await previousSecret(id, -60);
    await previousSecret(overlapping, 3600);
    // Deactivations told (sent, logged, or folded into a later e-mail) go with the attempts; an untold one stays, however old: its e-mail is still due.
    const deactivation = async (daysAgo: number, handledAs: 'sent' | 'logged' | 'folded' | null, toldIn?: string) =>
      (
        await t.database.pool.query<{ id: string }>(
          `INSERT INTO webhook.deactivation_alerts (subscription_id, recipients, reason, created_at, handled_as, handled_at, deactivations_told, told_in)
           VALUES ($1, '{}', $2, now() - make_interval(days => $3),
                   $4::text, CASE WHEN $4::text IS NOT NULL THEN now() - make_interval(days => $3) END, CASE WHEN $4::text IN ('sent', 'logged') THEN 1 END, $5)
           RETURNING id`,
          [id, `${handledAs ?? 'untold'} ${daysAgo} days ago`, daysAgo, handledAs, toldIn ?? null],
        )
      ).rows[0]!.id;
    const oldMail = await deactivation(41, 'sent');
    await deactivation(42, 'folded', oldMail);
    await deactivation(40, 'logged');
    await deactivation(40, null);
    const recentMail = await deactivation(29, 'sent');
    await deactivation(29, 'folded', recentMail);

    const { rows: jobs } = await t.database.pool.query<{ id: string }>(`SELECT id FROM graphile_worker.add_job('delivery_log_cleanup')`);
    // A job that succeeded is deleted; one that failed stays, with its error.
    await waitFor(async () => {
      const { rowCount } = await t.database.pool.query('SELECT 1 FROM graphile_worker.jobs WHERE id = $1', [jobs[0]!.id]);
      return rowCount === 0 ? true : undefined;
    });
    const remaining = await attemptsOf(t, id);
    expect(remaining.map((row) => [row.kind, row.resource_id])).toEqual([
      ['handshake', null],
      ['notification', 'recent'],
    ]);
    const { rows: events } = await t.database.pool.query(`SELECT resource_id FROM webhook.subscription_events ORDER BY resource_id`);
    expect(events.map((row) => row.resource_id)).toEqual(['recent', 'waiting']);
    const { rows: secrets } = await t.database.pool.query(
      `SELECT id, previous_signing_secret_encrypted IS NOT NULL AS kept FROM webhook.subscriptions WHERE id = ANY($1)`,
      [[id, overlapping]],
    );
    expect(Object.fromEntries(secrets.map((row) => [row.id, row.kept]))).toEqual({ [id]: false, [overlapping]: true });
    const { rows: deactivations } = await t.database.pool.query(`SELECT reason FROM webhook.deactivation_alerts WHERE subscription_id = $1 ORDER BY reason`, [
      id,
    ]);
    expect(deactivations.map((row) => row.reason)).toEqual(['folded 29 days ago', 'sent 29 days ago', 'untold 40 days ago']);
  });

  it('the webhook.delivery_log view shows each attempt with its subscription criteria and endpoint', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Patient?gender=female', endpoint.url);
    await untilStatus(t, id, 'active');
    const created = (await t.fhir('POST', '/Patient', { resourceType: 'Patient', gender: 'female' })).json();
    await endpoint.waitForCalls(2);
    const rows = await waitFor(async () => {
      const { rows } = await t.database.pool.query(
        `SELECT kind, outcome, http_status, attempt, resource_type, resource_id, version_id, subscription_id, criteria, endpoint, subscription_status, failure_count
         FROM webhook.delivery_log WHERE subscription_id = $1 ORDER BY started_at`,
        [id],
      );
      return rows.length === 2 ? rows : undefined;
    });
    const common = {
      subscription_id: id,
      criteria: 'Patient?gender=female',
      endpoint: endpoint.url,
      subscription_status: 'active',
      failure_count: 0,
      http_status: 200,
      outcome: 'delivered',
      attempt: 1,
    };
    expect(rows).toEqual([
      { ...common, kind: 'handshake', resource_type: null, resource_id: null, version_id: null },
      { ...common, kind: 'notification', resource_type: 'Patient', resource_id: created.id, version_id: 1 },
    ]);
  });
});
