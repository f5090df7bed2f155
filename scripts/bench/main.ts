/**
 * npm run bench [-- --json] [-- --only drain,broad] [-- --servers embedded,url]
 * [-- --processes worker,serve]: the delivery engine against its ceilings,
 * every figure beside ceilings measured in the same run, so that ratios hold
 * on a noisy machine (issue 9).
 *
 * Columns (issue 26): each server, a throwaway embedded PostgreSQL and
 * DATABASE_URL's when it is set, each with the dispatcher as an operator runs
 * it (`worker` processes beside an API) and as a newcomer does (`serve`: the
 * API and the workers in one process, `npm start`, written to through its
 * API). Each column runs on a scratch database of its own, which it drops.
 *
 * Rows, with their targets (issue 17):
 *   ceiling    graphile-worker alone: no-op jobs/s at concurrency 10, from the
 *              commit of one statement adding them to the empty queue
 *   receiver   the receiver's ceiling: the drain's bodies with the channel's
 *              headers and signatures, POSTed by a bare undici process with
 *              the calls in flight the dispatcher makes to one subscription
 *              (DELIVERY_PARALLEL_CALLS): POSTs/s
 *   drain      deliveries/s from the commit of ONE statement writing N matching
 *              rows to the last delivery (1 subscription): ≥ 2× the ceiling,
 *              and ≥ 0.6× the receiver's ceiling (issue 35)
 *   fan-out    10 subscriptions matching the same 2,000 events: ≥ drain
 *   max-count  a topic-based subscription's drain of 10,000 events of ONE
 *              statement with max-count 100 vs without (one event per call):
 *              events/s and calls made, each (issue 28)
 *   API burst  5,000 resources in transaction Bundles of 250 through the API
 *              (in this process), first write → last delivery
 *   writer     a Bundle of 250 with 1 matching subscription vs none (median): ≤ 1.3×
 *   broad      1,000 subscriptions all matching 20 single-row writes: ≥ 2× the ceiling
 *   latency    single-row INSERTs at 100/s for 10 s matching 1, then 11
 *              subscriptions: p99 commit → receipt ≤ 10 ms, ≤ 20 ms
 *   sparse     1,000 subscriptions, each write at 100/s matching one: p99 ≤ 20 ms
 *   websocket  200 websocket clients bound to 20 topic-based websocket
 *              subscriptions (10 each) on the API the column runs, each write
 *              at 50/s for 10 s matching one: p99 commit → frame ≤ 25 ms, a
 *              just-bound subscription's first frame ≤ 50 ms; every frame
 *              once and in order per client (issue 35); then the same with
 *              each subscription's clients on two API servers
 *   isolation  20 hanging subscribers beside one at 10 writes/s: its p99 ≤ 50 ms
 *   backlog    100,000 events recorded while no worker runs, then drained: the
 *              rate of the last 10% ≥ 0.8× the first 10%, nothing left behind
 *   peak RSS   of the worker process (a `worker` command, as an operator runs
 *              it, beside this one, which writes and runs the API): ≤ 300 MiB
 *   scaling    fan-out 16 × 3,000 by 2, 4 (and 8, given 8 cores) `worker`
 *              processes vs one: 2 no slower than 1; 8 ≥ 5× (issue 26)
 *   NOTIFY     commits/s of 8 writers with a NOTIFY each vs none (what the
 *              one NOTIFY per writing statement costs)
 *   brokers    events/s of ONE statement of 2,000 events into NATS JetStream
 *              and RabbitMQ through one topic subscription's broker channel,
 *              each message received once and in order, vs a bare client's
 *              acknowledged publishes, one at a time (issue 37)
 *   history    p99 at 100 writes/s over 101 subscriptions with 1,000,000
 *              settled events and calls in the log vs without: ≤ 2× (issue 26)
 *   soak       single-row writes at 50/s over 101 subscriptions (each matching
 *              one) for a minute, or --soak-minutes, with a REPEATABLE READ
 *              transaction holding its snapshot on a connection of its own
 *              throughout: the last quarter's p99 commit → receipt ≤ 2× the
 *              first's, none lost or doubled (issue 35)
 *   outage     200 healthy subscribers beside 50 failing: their p99 ≤ 2× and
 *              the database's CPU per write ≤ 1.3× the same before (issue 26)
 *   database CPU  of the database's backends per 1,000 deliveries in the
 *              drain and broad rows, vs per 1,000 of the ceiling's no-op jobs:
 *              ≤ 0.5× (issue 26; only for a server on this machine)
 * Every delivery is checked: each event arrives exactly once per matching
 * subscription, with a valid signature (duplicates and misses are reported).
 *
 * Each row is a file of rows/ (both ceilings in ceilings.ts); this file measures
 * them column by column, over the harness in harness/: the arguments
 * (run.ts), the dispatcher processes and the APIs the rows write through
 * (dispatcher.ts), subscribing and waiting for every delivery
 * (deliveries.ts), commit → receipt (latencies.ts), where the time goes
 * (profile.ts), the receiver ceiling's sender process (bare-sender.ts), and
 * the table (table.ts).
 */
import pg from 'pg';
import { startBenchReceiver } from '../support/bench-receiver.ts';
import { createScratchDatabase } from '../support/scratch-database.ts';
import { withDispatcher, withPeakRss, type ProcessKind } from './harness/dispatcher.ts';
import { options, secret, wanted } from './harness/run.ts';
import { print, withTargets, type Column, type Row } from './harness/table.ts';
import { apiBurst } from './rows/api-burst.ts';
import { backlog } from './rows/backlog.ts';
import { broad } from './rows/broad.ts';
import { graphileWorkerCeiling, receiverCeiling } from './rows/ceilings.ts';
import { drain } from './rows/drain.ts';
import { fanOut } from './rows/fan-out.ts';
import { historyCost } from './rows/history.ts';
import { isolation } from './rows/isolation.ts';
import { latency } from './rows/latency.ts';
import { topicDrain } from './rows/max-count.ts';
import { notifyCost } from './rows/notify.ts';
import { outage } from './rows/outage.ts';
import { scaling } from './rows/scaling.ts';
import { soak } from './rows/soak.ts';
import { sparse } from './rows/sparse.ts';
import { throttled } from './rows/throttle.ts';
import { topicTriggerCost } from './rows/topic-trigger.ts';
import { brokerRows } from './rows/brokers.ts';
import { websocketFrames } from './rows/websocket.ts';
import { writerCost } from './rows/writer-cost.ts';

/** The server's version as it reports it (\`15.20\`, \`18.4\`). */
async function serverVersion(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<{ server_version: string }>('SHOW server_version')).rows[0]!.server_version.split(' ')[0]!;
  } finally {
    await client.end();
  }
}

/**
 * Every wanted row on a scratch database of its own on `serverUrl` (null: a
 * throwaway embedded PostgreSQL) with the dispatcher in processes of `kind`,
 * then the ceilings on the same database. The rows of the worker processes
 * alone (backlog, scaling) and of the database alone (topic trigger,
 * NOTIFY) are in the worker columns.
 */
async function measureColumn(serverUrl: string | null, kind: ProcessKind): Promise<Column> {
  const scratch = await createScratchDatabase(serverUrl);
  try {
    const server = `PostgreSQL ${await serverVersion(scratch.url)}${serverUrl === null ? ' (embedded)' : ''}`;
    const measured: Row[] = [];
    /** Measures a row or rows (when wanted) with the peak RSS of the dispatcher processes that ran meanwhile. */
    const measure = async (name: string, row: () => Promise<Row | Row[]>) => {
      if (!wanted(name)) return;
      const { result, peakRssKiB } = await withPeakRss(row);
      for (const each of [result].flat()) measured.push({ ...each, ...(peakRssKiB === 0 ? {} : { peakRssMiB: peakRssKiB / 1024 }) });
    };
    await withDispatcher(
      scratch.url,
      receiver,
      async (bench) => {
        await measure('drain', () => drain(bench, Number(options.rows)));
        await measure('fan-out', () => fanOut(bench, 10, 2_000));
        await measure('api', () => apiBurst(bench));
        await measure('writer', () => writerCost(bench));
        await measure('latency', () => latency(bench, 1, 'planned'));
        await measure('latency', () => latency(bench, 11, 'arrived'));
        await measure('sparse', () => sparse(bench, 1_000));
        await measure('websocket', () => websocketFrames(bench, 20, 10));
        await measure('websocket', () => websocketFrames(bench, 20, 10, 2));
        // After the latency rows: its 20,000 settled events leave the pending-events index to vacuum.
        await measure('broad', () => broad(bench, 1_000, 20));
        await measure('isolation', () => isolation(bench));
        await measure('throttle', () => throttled(bench, 50, 500, 5_000));
        await measure('max-count', () => topicDrain(bench, 10_000));
        // Before history, whose million settled events would be in its path too.
        await measure('soak', () => soak(bench, scratch.url, Number(options.soakMinutes)));
        // Last: the history it adds stays in the log.
        await measure('history', () => historyCost(bench, Number(options.history)));
      },
      kind,
    );
    if (wanted('outage')) measured.push(...(await outage(scratch.url, receiver, kind, Number(options.outageSeconds))));
    if (kind === 'worker') await measure('backlog', () => backlog(scratch.url, receiver, Number(options.backlog)));
    const peak = Math.max(...measured.map((row) => row.peakRssMiB ?? 0));
    if (peak > 0)
      measured.push({ row: 'peak RSS of the dispatcher process, over the rows above', figure: peak, unit: 'MiB', target: '≤ 300 MiB', met: peak <= 300 });
    if (kind === 'worker') {
      await measure('topic', () => topicTriggerCost(scratch.url));
      if (wanted('scaling')) measured.push(...(await scaling(scratch.url, receiver)));
      await measure('notify', () => notifyCost(scratch.url));
      await measure('brokers', () => brokerRows(scratch.url, receiver, 2_000));
    }
    const ceilings = [await graphileWorkerCeiling(scratch.url, 20_000), await receiverCeiling(scratch.url, receiver, 20_000)];
    return { server, kind, rows: withTargets([...ceilings, ...measured]) };
  } finally {
    await scratch.drop();
  }
}

const servers = options.servers.split(',').map((server) => server.trim());
const kinds = options.processes.split(',').map((kind) => kind.trim());
if (servers.some((server) => server !== 'embedded' && server !== 'url') || kinds.some((kind) => kind !== 'worker' && kind !== 'serve')) {
  console.error('--servers takes embedded and url, --processes worker and serve');
  process.exit(2);
}
if (servers.includes('url') && !process.env.DATABASE_URL) {
  console.error('--servers url needs DATABASE_URL');
  process.exit(2);
}
const receiver = await startBenchReceiver(secret);
try {
  const columns: Column[] = [];
  for (const server of servers) {
    for (const kind of kinds as ProcessKind[]) columns.push(await measureColumn(server === 'url' ? process.env.DATABASE_URL! : null, kind));
  }
  print(columns);
} finally {
  receiver.stop();
}
