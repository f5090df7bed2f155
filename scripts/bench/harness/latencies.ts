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
  await pacedWrites(bench, resource, acknowledged, writes, 100);
  await until(async () => latencies.length >= writes * matches, 120_000, `${writes * matches} deliveries`);
  return latencies;
}

/** Writes `resource(n)` for n = 1…`writes` at `perSecond`, one resource per write, calling `acknowledged(id)` as each write commits. */
export async function pacedWrites(
  bench: Bench,
  resource: (n: number) => WrittenResource,
  acknowledged: (id: string) => void,
  writes: number,
  perSecond: number,
): Promise<void> {
  const started = wallNow();
  for (let n = 1; n <= writes; n++) {
    const due = started + (n * 1000) / perSecond;
    const wait = due - wallNow();
    if (wait > 0) await sleep(wait);
    const written = resource(n);
    await bench.writeOne(written);
    acknowledged(written.id);
  }
}

/** Commit → receipt of each delivery to `paths` (see commitClock). */
export function commitToReceipt(bench: Bench, paths: string[]): CommitClock {
  const clock = commitClock();
  bench.receiver.onReceipt((receipt) => {
    if (receipt.kind === 'resource' && paths.includes(receipt.path)) clock.received(receipt.id, receipt.receivedAt);
  });
  return clock;
}

/** Commit → receipt of what tells of a written resource: call `acknowledged(id)` when its write commits, `received(id, at)` when it arrives. */
export type CommitClock = { acknowledged: (id: string) => void; received: (id: string, receivedAt: number) => void; latencies: number[] };

/**
 * Commit → receipt, per receipt, the commit being when the writer's write was
 * acknowledged. A receipt that comes before the acknowledgement (the
 * dispatcher is another process, and may be quicker than the answer to the
 * writer) counts as 0 ms: it was received after its commit, and it must not
 * be lost to the count.
 */
export function commitClock(): CommitClock {
  const acknowledgedAt = new Map<string, number>();
  const early = new Map<string, number[]>();
  const latencies: number[] = [];
  const received = (id: string, receivedAt: number) => {
    const at = acknowledgedAt.get(id);
    if (at !== undefined) latencies.push(receivedAt - at);
    else early.set(id, [...(early.get(id) ?? []), receivedAt]);
  };
  const acknowledged = (id: string) => {
    const at = wallNow();
    acknowledgedAt.set(id, at);
    for (const receivedAt of early.get(id) ?? []) latencies.push(Math.max(0, receivedAt - at));
    early.delete(id);
  };
  return { acknowledged, received, latencies };
}

/** A row of p99 commit → receipt (`received`: what is received, when not a call to the receiver) against `targetMs`. */
export function latencyRow(label: string, latencies: number[], targetMs: number, received = 'receipt'): Row {
  const p = (fraction: number) => percentile(latencies, fraction);
  return {
    row: `${label}: p99 commit → ${received}`,
    figure: p(0.99),
    unit: 'ms',
    target: `p99 ≤ ${targetMs} ms`,
    met: p(0.99) <= targetMs,
    checks: `p50 ${p(0.5).toFixed(1)} ms, p95 ${p(0.95).toFixed(1)} ms, p99 ${p(0.99).toFixed(1)} ms, max ${Math.max(...latencies).toFixed(1)} ms over ${latencies.length} deliveries`,
  };
}
