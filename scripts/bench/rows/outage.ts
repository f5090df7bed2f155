import type { BenchReceiver } from '../../support/bench-receiver.ts';
import { meterDatabaseCpu } from '../../support/database-cpu.ts';
import { percentile } from '../../support/statistics.ts';
import { subscribe, switchOff } from '../harness/deliveries.ts';
import { withDispatcher, type ProcessKind } from '../harness/dispatcher.ts';
import { pacedLatencies } from '../harness/latencies.ts';
import type { Row } from '../harness/table.ts';

/**
 * Healthy subscribers beside failing ones (issue 26): 200 subscriptions that
 * stay healthy and 50 that fail in the second phase (20 answer 503 to
 * notifications and 2xx to handshakes, so that each event reactivates them
 * and they flap; 20 hang; 10 answer after 1.5 s), with retries after 0.5 s
 * and 1 s, 3 attempts, a 2 s response timeout. Each write, 100 a second,
 * matches one healthy and one failing subscription in turn; 30 s with all
 * answering, then `outageSeconds` with the 50 failing. Commit → receipt of
 * the healthy ones, and the database's CPU per write, in each phase.
 */
export async function outage(url: string, receiver: BenchReceiver, kind: ProcessKind, outageSeconds: number): Promise<Row[]> {
  // Its deactivations are expected: the worker's warnings about them are left out of the bench's output.
  const settings = { DELIVERY_RETRY_DELAYS_MS: '500,1000', DELIVERY_MAX_FAILURES: '3', DELIVERY_RESPONSE_TIMEOUT_MS: '2000', LOG_LEVEL: 'error' };
  return withDispatcher(
    url,
    receiver,
    async (bench) => {
      const system = 'http://bench.example/outage';
      const healthy = await subscribe(
        bench,
        Array.from({ length: 200 }, (_, n) => `Encounter?identifier=${system}|h-${n}`),
      );
      const failing = [
        ...(await subscribe(
          bench,
          Array.from({ length: 20 }, (_, n) => `Encounter?identifier=${system}|f-${n}`),
          '/flaky',
        )),
        ...(await subscribe(
          bench,
          Array.from({ length: 20 }, (_, n) => `Encounter?identifier=${system}|f-${20 + n}`),
          '/stall',
        )),
        ...(await subscribe(
          bench,
          Array.from({ length: 10 }, (_, n) => `Encounter?identifier=${system}|f-${40 + n}`),
          '/slow',
        )),
      ];
      let written = 0;
      const resource = (n: number) => {
        written += 1;
        return {
          resourceType: 'Encounter',
          id: `outage-${written}`,
          status: 'planned',
          class: { code: 'AMB' },
          identifier: [
            { system, value: `h-${n % healthy.length}` },
            { system, value: `f-${n % failing.length}` },
          ],
        };
      };
      const phase = async (seconds: number) => {
        const writes = seconds * 100;
        const databaseCpu = await meterDatabaseCpu(url);
        const latencies = await pacedLatencies(bench, healthy, 1, resource, writes);
        const cpu = await databaseCpu.stop();
        return { latencies, cpuPerWriteMs: cpu === undefined ? undefined : (cpu / writes) * 1000 };
      };
      const before = await phase(30);
      await receiver.setOutage(true);
      const outageStarted = new Date();
      const during = await phase(outageSeconds);
      await receiver.setOutage(false);
      const { rows } = await bench.database.pool.query<{ handshakes: number; failed: number; deactivations: number }>(
        `SELECT count(*) FILTER (WHERE kind = 'handshake')::int AS handshakes,
                count(*) FILTER (WHERE kind = 'notification' AND outcome <> 'delivered')::int AS failed,
                (SELECT count(*)::int FROM webhook.deactivation_alerts alert WHERE alert.created_at >= $1) AS deactivations
         FROM webhook.delivery_attempts WHERE started_at >= $1`,
        [outageStarted],
      );
      await switchOff(bench, [
        ...Array.from({ length: 200 }, (_, n) => `Encounter?identifier=${system}|h-${n}`),
        ...Array.from({ length: 50 }, (_, n) => `Encounter?identifier=${system}|f-${n}`),
      ]);
      const p99 = (latencies: number[]) => percentile(latencies, 0.99);
      const ratio = p99(during.latencies) / p99(before.latencies);
      const calls = rows[0]!;
      const rowsOut: Row[] = [
        {
          row: `outage: 200 healthy subscribers' p99 while 50 fail (${outageSeconds} s) vs before`,
          figure: ratio,
          unit: '×',
          target: '≤ 2×',
          met: ratio <= 2,
          checks:
            `p99 ${p99(before.latencies).toFixed(1)} ms before (${before.latencies.length} deliveries), ${p99(during.latencies).toFixed(1)} ms during (${during.latencies.length}); ` +
            `during the outage ${calls.handshakes} handshakes, ${calls.failed} notifications not delivered, ${calls.deactivations} deactivations`,
        },
      ];
      if (before.cpuPerWriteMs !== undefined && during.cpuPerWriteMs !== undefined) {
        const cpuRatio = during.cpuPerWriteMs / before.cpuPerWriteMs;
        rowsOut.push({
          row: `outage: database CPU per write while 50 fail vs before`,
          figure: cpuRatio,
          unit: '×',
          target: '≤ 1.3×',
          met: cpuRatio <= 1.3,
          checks: `${before.cpuPerWriteMs.toFixed(2)} ms per write before, ${during.cpuPerWriteMs.toFixed(2)} ms during`,
        });
      }
      return rowsOut;
    },
    kind,
    settings,
  );
}
