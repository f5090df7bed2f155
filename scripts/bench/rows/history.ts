import { wallNow } from '../../support/bench-receiver.ts';
import { percentile } from '../../support/statistics.ts';
import { subscribe, switchOff } from '../harness/deliveries.ts';
import type { Bench } from '../harness/dispatcher.ts';
import { pacedLatencies } from '../harness/latencies.ts';
import type { Row } from '../harness/table.ts';

/**
 * The log's history (issue 26, item 6: on PostgreSQL 15 the p99 stepped from
 * 4–6 ms to 59–100 ms after 26 minutes of writes, the database then past its
 * shared_buffers): 101 subscriptions, each write at 100/s matching one in
 * turn, for 30 s with the log as the rows before left it, then again after
 * adding `settled` delivered events and as many calls to those subscriptions,
 * hours of such traffic. The tail must not grow with what the tables hold.
 */
export async function historyCost(bench: Bench, settled: number): Promise<Row> {
  const system = 'http://bench.example/history';
  const criteria = Array.from({ length: 101 }, (_, n) => `Encounter?identifier=${system}|${n}`);
  const paths = await subscribe(bench, criteria);
  const resource = (round: string) => (n: number) => ({
    resourceType: 'Encounter',
    id: `history-${round}-${n}`,
    status: 'planned',
    class: { code: 'AMB' },
    identifier: [{ system, value: String(n % criteria.length) }],
  });
  const before = await pacedLatencies(bench, paths, 1, resource('before'), 3_000);
  const startedAt = wallNow();
  // Numbered after each subscription's last number (webhook.last_event_number reads it from the log), as deliveries would have.
  await bench.database.pool.query(
    `WITH subscription AS (
       SELECT s.id, webhook.last_event_number(s.id) AS last_event_number, row_number() OVER (ORDER BY s.id) - 1 AS place, count(*) OVER () AS subscriptions
       FROM webhook.subscriptions s
       WHERE s.criteria = ANY ($2) AND s.status = 'active'
     ), past AS (
       SELECT subscription.id AS subscription_id, 'Encounter' AS resource_type, 'past-' || n AS resource_id,
              subscription.last_event_number + n / subscription.subscriptions + 1 AS event_number,
              now() - interval '1 second' * ($1::int - n) / 100 AS at
       FROM generate_series(0, $1::int - 1) n
       JOIN subscription ON subscription.place = n % subscription.subscriptions
     ), events AS (
       INSERT INTO webhook.subscription_events (subscription_id, resource_type, resource_id, version_id, deleted, written_at, event_number, attempts, status, settled_at)
       SELECT subscription_id, resource_type, resource_id, 1, false, at, event_number, 1, 'delivered', at FROM past
     )
     INSERT INTO webhook.delivery_attempts (subscription_id, kind, resource_type, resource_id, version_id, event_number, attempt, started_at, duration_ms, http_status, outcome)
     SELECT subscription_id, 'notification', resource_type, resource_id, 1, event_number, 1, at, 2, 200, 'delivered' FROM past`,
    [settled, criteria],
  );
  const loadSeconds = (wallNow() - startedAt) / 1000;
  const after = await pacedLatencies(bench, paths, 1, resource('after'), 3_000);
  await switchOff(bench, criteria);
  const p99 = (latencies: number[]) => percentile(latencies, 0.99);
  const ratio = p99(after) / p99(before);
  return {
    row: `history: p99 at 100 writes/s with ${settled.toLocaleString('en-US')} settled events and calls in the log vs without`,
    figure: ratio,
    unit: '×',
    target: '≤ 2×',
    met: ratio <= 2,
    checks: `p99 ${p99(before).toFixed(1)} ms before, ${p99(after).toFixed(1)} ms after (p50 ${percentile(before, 0.5).toFixed(1)} / ${percentile(after, 0.5).toFixed(1)} ms); the history written in ${loadSeconds.toFixed(0)} s`,
  };
}
