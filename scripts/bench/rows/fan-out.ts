import { committedAt, deliverAll, subscribe, switchOff } from '../harness/deliveries.ts';
import type { Bench } from '../harness/dispatcher.ts';
import type { Row } from '../harness/table.ts';

/** Fan-out: `subscriptions` subscriptions matching each of the `events` rows of ONE statement. */
export async function fanOut(bench: Bench, subscriptions: number, events: number, label = 'fan-out'): Promise<Row> {
  const { rate, checks } = await fanOutRate(bench, subscriptions, events, label);
  return { row: `${label}: ${subscriptions} subscriptions × ${events.toLocaleString('en-US')} events`, figure: rate, unit: 'deliveries/s', checks };
}

export async function fanOutRate(bench: Bench, subscriptions: number, events: number, label: string): Promise<{ rate: number; checks: string }> {
  // Different criteria strings (one live subscription per criteria) that all match a final Observation of this run.
  const prefix = label.replace(/\W+/g, '-');
  const criteria = Array.from({ length: subscriptions }, (_, n) => `Observation?status=final,${prefix}-${n + 1}&code=${prefix}`);
  const paths = await subscribe(bench, criteria);
  const ids = Array.from({ length: events }, (_, n) => `${prefix}-${n + 1}`);
  const result = await deliverAll(bench, paths, ids, () =>
    committedAt(
      bench.database.pool.query(
        `INSERT INTO fhir.resources (content)
         SELECT jsonb_build_object('resourceType', 'Observation', 'id', $2 || '-' || n, 'status', 'final', 'code', jsonb_build_object('coding', jsonb_build_array(jsonb_build_object('code', $2::text))))
         FROM generate_series(1, $1::int) n`,
        [events, prefix],
      ),
    ),
  );
  await switchOff(bench, criteria);
  return result;
}
