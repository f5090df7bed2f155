import { cpus } from 'node:os';
import type { BenchReceiver } from '../../support/bench-receiver.ts';
import { withDispatcherProcesses } from '../harness/dispatcher.ts';
import type { Row } from '../harness/table.ts';
import { fanOutRate } from './fan-out.ts';

/**
 * Scaling out: a fan-out of 16 subscriptions × 3,000 events delivered by 1, 2
 * and 4 `worker` processes (and 8 where the machine has 8 cores), each
 * against one. Targets (issue 26): 2 no slower than 1 on a small machine; 8 at
 * least 5× one where there are cores for them.
 */
export async function scaling(url: string, receiver: BenchReceiver): Promise<Row[]> {
  const counts = [1, 2, 4, ...(cpus().length >= 8 ? [8] : [])];
  const rates = new Map<number, { rate: number; checks: string }>();
  for (const processes of counts) {
    rates.set(
      processes,
      await withDispatcherProcesses(url, receiver, { kind: 'worker', processes }, (bench) => fanOutRate(bench, 16, 3_000, `scaling ${processes}`)),
    );
  }
  const one = rates.get(1)!.rate;
  return counts.slice(1).map((processes) => {
    const { rate, checks } = rates.get(processes)!;
    const target = processes === 2 ? 1 : processes === 8 ? 5 : undefined;
    return {
      row: `${processes} worker processes vs 1: fan-out 16 subscriptions × 3,000 events`,
      figure: rate / one,
      unit: '×',
      ...(target === undefined ? {} : { target: `≥ ${target}×`, met: rate / one >= target }),
      checks: `1 process ${Math.round(one)}/s, ${processes} ${Math.round(rate)}/s; ${checks}`,
    };
  });
}
