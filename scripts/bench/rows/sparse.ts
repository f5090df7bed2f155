import { subscribe, switchOff } from '../harness/deliveries.ts';
import type { Bench } from '../harness/dispatcher.ts';
import { latencyRow, pacedLatencies } from '../harness/latencies.ts';
import type { Row } from '../harness/table.ts';

/**
 * Sparse: `subscriptions` subscriptions, each on its own identifier; single-row
 * INSERTs at 100 per second for 10 s, each matching one of them in turn.
 */
export async function sparse(bench: Bench, subscriptions: number): Promise<Row> {
  const system = 'http://bench.example/sparse';
  const criteria = Array.from({ length: subscriptions }, (_, n) => `Encounter?identifier=${system}|s-${n + 1}`);
  const paths = await subscribe(bench, criteria);
  const latencies = await pacedLatencies(bench, paths, 1, (n) => ({
    resourceType: 'Encounter',
    id: `sparse-${n}`,
    status: 'planned',
    class: { code: 'AMB' },
    identifier: [{ system, value: `s-${((n - 1) % subscriptions) + 1}` }],
  }));
  await switchOff(bench, criteria);
  return latencyRow(`sparse: ${subscriptions.toLocaleString('en-US')} subscriptions, each write at 100/s matching one`, latencies, 20);
}
