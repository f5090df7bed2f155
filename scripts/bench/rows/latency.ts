import { subscribe, switchOff } from '../harness/deliveries.ts';
import type { Bench } from '../harness/dispatcher.ts';
import { latencyRow, pacedLatencies } from '../harness/latencies.ts';
import type { Row } from '../harness/table.ts';

/**
 * Single-row INSERTs at 100 per second for 10 s, each matching `subscriptions`
 * subscriptions: commit (the INSERT's acknowledgement) → receipt, per delivery.
 */
export async function latency(bench: Bench, subscriptions: number, status: string): Promise<Row> {
  const criteria = Array.from({ length: subscriptions }, (_, n) => `Encounter?status=${status},bench-${n + 1}`);
  const paths = await subscribe(bench, criteria);
  const latencies = await pacedLatencies(bench, paths, subscriptions, (n) => ({
    resourceType: 'Encounter',
    id: `${status}-${n}`,
    status,
    class: { code: 'AMB' },
  }));
  await switchOff(bench, criteria);
  return latencyRow(
    `latency at 100 writes/s, ${subscriptions} matching subscription${subscriptions === 1 ? '' : 's'}`,
    latencies,
    subscriptions === 1 ? 10 : 20,
  );
}
