import pg from 'pg';
import type { BenchReceiver } from '../../support/bench-receiver.ts';
import { subscribe } from '../harness/deliveries.ts';
import { until } from '../../support/waiting.ts';
import { withDispatcher } from '../harness/dispatcher.ts';
import type { Row } from '../harness/table.ts';

/**
 * A backlog: `events` notifications queued while no worker runs, then drained.
 * The rate of the last 10% against the first 10%, and no event or job left behind.
 */
export async function backlog(url: string, receiver: BenchReceiver, events: number): Promise<Row> {
  const [path] = await withDispatcher(url, receiver, (bench) => subscribe(bench, ['Appointment?status=waitlist']));
  const writer = new pg.Client({ connectionString: url });
  await writer.connect();
  await writer.query(
    `INSERT INTO fhir.resources (content)
     SELECT jsonb_build_object('resourceType', 'Appointment', 'id', 'backlog-' || n, 'status', 'waitlist', 'participant', jsonb_build_array())
     FROM generate_series(1, $1::int) n`,
    [events],
  );
  const receipts: number[] = [];
  const seen = new Set<string>();
  receiver.onReceipt((receipt) => {
    if (receipt.kind !== 'resource' || receipt.path !== path || seen.has(receipt.id)) return;
    seen.add(receipt.id);
    receipts.push(receipt.receivedAt);
  });
  const left = await withDispatcher(url, receiver, async () => {
    await until(async () => seen.size === events, 120_000 + events * 10, `${events} backlog deliveries`);
    const unsettled = async () =>
      (
        await writer.query<{ n: number }>(
          `SELECT (SELECT count(*) FROM webhook.pending_events)::int
              + (SELECT count(*) FROM graphile_worker.jobs)::int AS n`,
        )
      ).rows[0]!.n;
    await until(async () => (await unsettled()) === 0, 30_000, 'no pending event and an empty queue').catch(() => undefined);
    return unsettled();
  });
  await writer.end();
  const tenth = Math.floor(events / 10);
  const rate = (from: number, to: number) => (to - from) / ((receipts[to - 1]! - receipts[from]!) / 1000);
  const first = rate(0, tenth);
  const last = rate(events - tenth, events);
  return {
    row: `backlog: ${events.toLocaleString('en-US')} events queued, then drained: last 10% vs first 10%`,
    figure: last / first,
    unit: '×',
    target: '≥ 0.8×, nothing left',
    met: last / first >= 0.8 && left === 0,
    checks: `first 10% ${Math.round(first)}/s, last 10% ${Math.round(last)}/s, ${left} events and jobs left behind`,
  };
}
