import { setTimeout as sleep } from 'node:timers/promises';
import { wallNow } from '../../support/bench-receiver.ts';
import { subscribe, switchOff } from '../harness/deliveries.ts';
import { until } from '../../support/waiting.ts';
import type { Bench } from '../harness/dispatcher.ts';
import { commitToReceipt, latencyRow } from '../harness/latencies.ts';
import type { Row } from '../harness/table.ts';

/**
 * Isolation: 20 subscribers that hang (the receiver never answers their
 * notifications, so each call waits for the 15 s response timeout) get an
 * event each 10 times a second, and so does an unrelated subscription, for
 * 10 s: its commit → receipt. Then the hanging ones are switched off.
 */
export async function isolation(bench: Bench): Promise<Row> {
  const hanging = 20;
  const hangingCriteria = Array.from({ length: hanging }, (_, n) => `Observation?code=hang-${n + 1}`);
  await subscribe(bench, hangingCriteria, '/hang');
  const [path] = await subscribe(bench, ['Encounter?status=entered-in-error']);
  const writes = 100;
  const { acknowledged, latencies } = commitToReceipt(bench, [path!]);
  const started = wallNow();
  for (let n = 1; n <= writes; n++) {
    const due = started + n * 100;
    const wait = due - wallNow();
    if (wait > 0) await sleep(wait);
    await bench.database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Observation', 'id', 'hang-' || k || '-' || $1::int, 'status', 'final',
                                 'code', jsonb_build_object('coding', jsonb_build_array(jsonb_build_object('code', 'hang-' || k))))
       FROM generate_series(1, $2::int) k`,
      [n, hanging],
    );
    const id = `isolated-${n}`;
    await bench.writeOne({ resourceType: 'Encounter', id, status: 'entered-in-error', class: { code: 'AMB' } });
    acknowledged(id);
  }
  await until(async () => latencies.length >= writes, 60_000, `${writes} deliveries`);
  await switchOff(bench, hangingCriteria);
  return latencyRow(`isolation: ${hanging} hanging subscribers, an unrelated one at 10 writes/s`, latencies, 50);
}
