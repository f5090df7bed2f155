import { wallNow } from '../../support/bench-receiver.ts';
import { deliverAll, subscribe, switchOff } from '../harness/deliveries.ts';
import type { Bench } from '../harness/dispatcher.ts';
import { cpuPerThousand, perThousand, profiled } from '../harness/profile.ts';
import type { Row } from '../harness/table.ts';

/**
 * Broad: `subscriptions` subscriptions (distinct criteria) all matching each of
 * `writes` single-row INSERTs, one after the other: deliveries/s from the
 * first commit to the last delivery.
 */
export async function broad(bench: Bench, subscriptions: number, writes: number): Promise<Row> {
  const criteria = Array.from({ length: subscriptions }, (_, n) => `Observation?status=preliminary,broad-${n + 1}`);
  const paths = await subscribe(bench, criteria);
  const ids = Array.from({ length: writes }, (_, n) => `broad-${n + 1}`);
  const { result, profile } = await profiled(bench, () =>
    deliverAll(bench, paths, ids, async () => {
      let first: number | undefined;
      for (const id of ids) {
        await bench.writeOne({ resourceType: 'Observation', id, status: 'preliminary', code: { text: 'broad' } });
        first ??= wallNow();
      }
      return first!;
    }),
  );
  const { rate, checks } = result;
  const deliveries = subscriptions * writes;
  await switchOff(bench, criteria);
  return {
    row: `broad: ${subscriptions.toLocaleString('en-US')} subscriptions all matching ${writes} single-row writes`,
    figure: rate,
    unit: 'deliveries/s',
    checks: `${checks}\n  where the time goes: ${profile.text}\n  ${cpuPerThousand(profile, deliveries)}`,
    ...perThousand(profile.databaseCpuSeconds, deliveries),
  };
}
