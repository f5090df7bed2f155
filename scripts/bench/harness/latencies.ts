import { setTimeout as sleep } from 'node:timers/promises';
import { wallNow } from '../../support/bench-receiver.ts';
import { percentile } from '../../support/statistics.ts';
import { until } from '../../support/waiting.ts';
import type { Bench, WrittenResource } from './dispatcher.ts';
import type { Row } from './table.ts';

/** Writes `resource(n)` for n = 1…`writes` at 100 per second, one resource per write: commit → receipt of each of its `matches` deliveries to `paths`. */
export async function pacedLatencies(
  bench: Bench,
  paths: string[],
  matches: number,
  resource: (n: number) => WrittenResource,
  writes = 1_000,
): Promise<number[]> {
  const { acknowledged, latencies } = commitToReceipt(bench, paths);
  const started = wallNow();
  for (let n = 1; n <= writes; n++) {
    const due = started + n * 10;
    const wait = due - wallNow();
    if (wait > 0) await sleep(wait);
    const written = resource(n);
    await bench.writeOne(written);
    acknowledged(written.id);
  }
  await until(async () => latencies.length >= writes * matches, 120_000, `${writes * matches} deliveries`);
  return latencies;
}

/**
 * Commit → receipt of each delivery to `paths`, the commit being when the
 * writer's INSERT was acknowledged (call `acknowledged(id)` then). A receipt
 * that comes before the acknowledgement (the dispatcher is another process,
 * and may be quicker than the answer to the writer) counts as 0 ms: it was
 * received after its commit, and it must not be lost to the count.
 */
export function commitToReceipt(bench: Bench, paths: string[]): { acknowledged: (id: string) => void; latencies: number[] } {
  const acknowledgedAt = new Map<string, number>();
  const early = new Map<string, number[]>();
  const latencies: number[] = [];
  bench.receiver.onReceipt((receipt) => {
    if (receipt.kind !== 'resource' || !paths.includes(receipt.path)) return;
    const at = acknowledgedAt.get(receipt.id);
    if (at !== undefined) latencies.push(receipt.receivedAt - at);
    else early.set(receipt.id, [...(early.get(receipt.id) ?? []), receipt.receivedAt]);
  });
  const acknowledged = (id: string) => {
    const at = wallNow();
    acknowledgedAt.set(id, at);
    for (const receivedAt of early.get(id) ?? []) latencies.push(Math.max(0, receivedAt - at));
    early.delete(id);
  };
  return { acknowledged, latencies };
}

export function latencyRow(label: string, latencies: number[], targetMs: number): Row {
  const p = (fraction: number) => percentile(latencies, fraction);
  return {
    row: `${label}: p99 commit → receipt`,
    figure: p(0.99),
    unit: 'ms',
    target: `p99 ≤ ${targetMs} ms`,
    met: p(0.99) <= targetMs,
    checks: `p50 ${p(0.5).toFixed(1)} ms, p95 ${p(0.95).toFixed(1)} ms, p99 ${p(0.99).toFixed(1)} ms, max ${Math.max(...latencies).toFixed(1)} ms over ${latencies.length} deliveries`,
  };
}
