import { wallNow } from '../../support/bench-receiver.ts';
import { percentile } from '../../support/statistics.ts';
import { subscribe, transactionBundle } from '../harness/deliveries.ts';
import type { Bench } from '../harness/dispatcher.ts';
import type { Row } from '../harness/table.ts';

/** What a matching subscription costs the writer: transaction Bundles of 250 with none, then with one, median time per Bundle. */
export async function writerCost(bench: Bench): Promise<Row> {
  const api = await bench.openApi();
  const bundles = 10;
  const timeBundles = async () => {
    const times: number[] = [];
    for (let n = 0; n < bundles; n++) {
      const body = transactionBundle(
        Array.from({ length: 250 }, () => ({
          resourceType: 'Slot',
          status: 'free',
          schedule: { reference: 'Schedule/bench' },
          start: '2026-01-01T09:00:00Z',
          end: '2026-01-01T09:15:00Z',
        })),
      );
      const started = wallNow();
      await api.postBundle(body);
      times.push(wallNow() - started);
    }
    return percentile(times, 0.5);
  };
  const none = await timeBundles();
  await subscribe(bench, ['Slot?status=free']);
  const one = await timeBundles();
  await api.close();
  return {
    row: 'writer cost: a transaction Bundle of 250 with 1 matching subscription vs none',
    figure: one / none,
    unit: '×',
    target: '≤ 1.3×',
    met: one / none <= 1.3,
    checks: `median ${none.toFixed(0)} ms with none, ${one.toFixed(0)} ms with one`,
  };
}
