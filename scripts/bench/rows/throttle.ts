import { wallNow } from '../../support/bench-receiver.ts';
import { subscribe } from '../harness/deliveries.ts';
import { until } from '../../support/waiting.ts';
import type { Bench } from '../harness/dispatcher.ts';
import type { Row } from '../harness/table.ts';

/**
 * A throttled subscriber beside a drain: one subscription limited to `rate`
 * calls a second (its max_calls_per_second) gets `throttledRows` events while
 * another, unthrottled, drains `drainRows`, written at the same time. The
 * throttled rate as its receiver sees it, and the drain's beside it.
 */
export async function throttled(bench: Bench, rate: number, throttledRows: number, drainRows: number): Promise<Row> {
  const [slowPath, fastPath] = await subscribe(bench, ['Appointment?status=arrived', 'Appointment?status=fulfilled']);
  await bench.database.pool.query(
    `UPDATE webhook.subscriptions SET max_calls_per_second = $1 WHERE criteria = 'Appointment?status=arrived' AND status = 'active'`,
    [rate],
  );
  const slow: number[] = [];
  const fast: number[] = [];
  bench.receiver.onReceipt((receipt) => {
    if (receipt.kind !== 'resource') return;
    if (receipt.path === slowPath) slow.push(receipt.receivedAt);
    if (receipt.path === fastPath) fast.push(receipt.receivedAt);
  });
  const write = (status: string, rows: number) =>
    bench.database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Appointment', 'id', $1 || '-' || n, 'status', $1, 'participant', jsonb_build_array())
       FROM generate_series(1, $2::int) n`,
      [status, rows],
    );
  const started = wallNow();
  await Promise.all([write('arrived', throttledRows), write('fulfilled', drainRows)]);
  await until(
    async () => slow.length >= throttledRows && fast.length >= drainRows,
    60_000 + (throttledRows / rate) * 2000,
    'the throttled and the drained deliveries',
  );
  const measured = (throttledRows - 1) / ((slow.at(-1)! - slow[0]!) / 1000);
  const drained = drainRows / ((Math.max(...fast) - started) / 1000);
  return {
    row: `throttle: a subscription at ${rate}/s (${throttledRows} events) beside an unthrottled drain of ${drainRows.toLocaleString('en-US')}`,
    figure: measured,
    unit: 'calls/s',
    target: `${rate}/s within 10%`,
    met: Math.abs(measured - rate) <= rate * 0.1,
    checks: `the throttled receiver got ${measured.toFixed(1)} calls/s; the drain beside it ${Math.round(drained).toLocaleString('en-US')} deliveries/s, done ${((Math.max(...fast) - started) / 1000).toFixed(1)} s after the writes`,
  };
}
