import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { percentile } from '../../support/statistics.ts';
import { until } from '../../support/waiting.ts';
import { subscribe, switchOff } from '../harness/deliveries.ts';
import type { Bench } from '../harness/dispatcher.ts';
import { commitClock, pacedWrites } from '../harness/latencies.ts';
import type { Row } from '../harness/table.ts';

/**
 * A held snapshot (issue 35, item 5): on a server whose vacuum lags, the
 * p99 stepped from 10–27 ms to 90–130 ms after 24 minutes of this traffic,
 * with 239,656 dead rows in webhook.subscription_events. 101 subscriptions,
 * each single-row write at 50/s matching one in turn, for `minutes`, while
 * a REPEATABLE READ transaction on a connection of its own holds its
 * snapshot from before the first write to after the last delivery — as a
 * DBA's long report would — so that no dead row the deliveries leave can be
 * vacuumed. The last quarter's p99 commit → receipt must stay within 2× the
 * first's, every write delivered exactly once.
 */
export async function soak(bench: Bench, url: string, minutes: number): Promise<Row> {
  const writes = Math.round(minutes * 60 * 50);
  const system = 'http://bench.example/soak';
  const criteria = Array.from({ length: 101 }, (_, n) => `Encounter?identifier=${system}|${n}`);
  const paths = await subscribe(bench, criteria);
  const snapshot = await holdSnapshot(url);
  try {
    const quarters = [commitClock(), commitClock()];
    /** The first quarter's clock, the last quarter's, or none for the writes between (1-based write numbers). */
    const clockOf = (n: number) => (n <= writes / 4 ? quarters[0] : n > (writes * 3) / 4 ? quarters[1] : undefined);
    const numberOf = (id: string) => Number(id.slice('soak-'.length));
    const receipts = new Map<number, number>();
    let unexpected = 0;
    let badSignatures = 0;
    bench.receiver.onReceipt((receipt) => {
      const subscription = paths.indexOf(receipt.path);
      if (receipt.kind !== 'resource' || subscription === -1) return;
      const n = numberOf(receipt.id);
      if (!(n >= 1 && n <= writes) || (n - 1) % criteria.length !== subscription) return void unexpected++;
      if (!receipt.signatureOk) badSignatures++;
      receipts.set(n, (receipts.get(n) ?? 0) + 1);
      clockOf(n)?.received(receipt.id, receipt.receivedAt);
    });
    await pacedWrites(
      bench,
      (n) => ({
        resourceType: 'Encounter',
        id: `soak-${n}`,
        status: 'planned',
        class: { code: 'AMB' },
        identifier: [{ system, value: String((n - 1) % criteria.length) }],
      }),
      (id) => clockOf(numberOf(id))?.acknowledged(id),
      writes,
      50,
    );
    // A delivery that never comes is reported as missing, not waited for: the row ends 30 s after the last write at most.
    await until(async () => receipts.size === writes, 30_000, `${writes} deliveries`).catch(() => undefined);
    // Late duplicates, if any, are counted too.
    await sleep(500);
    const deadRows = await deadSubscriptionEvents(bench);
    await switchOff(bench, criteria);
    const duplicates = [...receipts.values()].reduce((sum, count) => sum + count - 1, 0);
    const missing = writes - receipts.size;
    const [first, last] = quarters.map((clock) => clock.latencies);
    const p = (latencies: number[], fraction: number) => percentile(latencies, fraction);
    const ratio = p(last!, 0.99) / p(first!, 0.99);
    const clean = missing + duplicates + unexpected + badSignatures === 0;
    return {
      row: `soak: p99 at 50 writes/s over 101 subscriptions for ${minutes} min with a snapshot held, last quarter vs first`,
      figure: ratio,
      unit: '×',
      target: '≤ 2×, none lost or doubled',
      met: ratio <= 2 && clean,
      checks:
        `p99 ${p(first!, 0.99).toFixed(1)} ms first quarter, ${p(last!, 0.99).toFixed(1)} ms last ` +
        `(p50 ${p(first!, 0.5).toFixed(1)} / ${p(last!, 0.5).toFixed(1)} ms); ` +
        `${writes} deliveries: ${missing} missing, ${duplicates} duplicates, ${unexpected} unexpected, ${badSignatures} bad signatures; ` +
        `webhook.subscription_events held ${deadRows.toLocaleString('en-US')} dead rows at the end`,
    };
  } finally {
    await snapshot.release();
  }
}

/**
 * A REPEATABLE READ transaction on a connection of its own, its snapshot taken
 * by a first SELECT and held (however the server limits idle transactions)
 * until `release`, which commits it and closes the connection (and throws if
 * the connection failed meanwhile: the row's figures are then not a held snapshot's).
 */
async function holdSnapshot(url: string): Promise<{ release: () => Promise<void> }> {
  const client = new pg.Client({ connectionString: url });
  let lost: Error | undefined;
  client.on('error', (error) => (lost ??= error));
  await client.connect();
  try {
    await client.query('SET idle_in_transaction_session_timeout = 0');
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await client.query('SELECT count(*) FROM webhook.subscription_events');
  } catch (error) {
    await client.end();
    throw error;
  }
  return {
    release: async () => {
      try {
        if (lost !== undefined) throw new Error(`the held snapshot's connection failed before the row's end: ${lost.message}`);
        await client.query('COMMIT');
      } finally {
        await client.end();
      }
    },
  };
}

/** webhook.subscription_events's dead rows as the statistics collector last counted them. */
async function deadSubscriptionEvents(bench: Bench): Promise<number> {
  const { rows } = await bench.database.pool.query<{ dead: string }>(
    `SELECT n_dead_tup AS dead FROM pg_stat_user_tables WHERE schemaname = 'webhook' AND relname = 'subscription_events'`,
  );
  return Number(rows[0]?.dead ?? 0);
}
