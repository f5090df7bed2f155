import { wallNow } from '../../support/bench-receiver.ts';
import { subscribe, transactionBundle } from '../harness/deliveries.ts';
import { until } from '../../support/waiting.ts';
import type { Bench } from '../harness/dispatcher.ts';
import type { Row } from '../harness/table.ts';

/** 5,000 resources written through the API in transaction Bundles of 250: deliveries/s from the first write to the last delivery. */
export async function apiBurst(bench: Bench): Promise<Row> {
  const [path] = await subscribe(bench, ['Appointment?status=proposed']);
  const api = await bench.openApi();
  const total = 5_000;
  const size = 250;
  const received = new Set<string>();
  let last = 0;
  bench.receiver.onReceipt((receipt) => {
    if (receipt.kind !== 'resource' || receipt.path !== path) return;
    received.add(receipt.id);
    last = Math.max(last, receipt.receivedAt);
  });
  const started = wallNow();
  for (let bundle = 0; bundle < total / size; bundle++) {
    await api.postBundle(transactionBundle(Array.from({ length: size }, () => ({ resourceType: 'Appointment', status: 'proposed', participant: [] }))));
  }
  await until(async () => received.size === total, 120_000, `${total} API deliveries`);
  await api.close();
  return {
    row: `API burst: ${total.toLocaleString('en-US')} resources in transaction Bundles of ${size}, first write → last delivery`,
    figure: total / ((last - started) / 1000),
    unit: 'deliveries/s',
  };
}
