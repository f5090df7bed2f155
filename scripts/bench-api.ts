/**
 * npm run bench:api [-- --duration S] [-- --connections N]: the HTTP API under
 * load, as clients see it (issue 11). Starts the service (`serve`: API and
 * workers) as a process of its own on a scratch database, a subscriber in
 * another, and drives the API with autocannon from this one:
 *
 *   load       S seconds (30), N connections (100), each connection cycling
 *              through a Patient create, a Patient search and a Subscription
 *              read: requests/s, latency p50/p99/max, errors, non-2xx
 *   delivery   every Patient the load created is delivered to the one
 *              subscription matching them all, exactly once: how long after
 *              the load ended the last one arrived
 *   costly     30 clients each repeating the costliest search a value may ask
 *              for (`name:contains=` 1,024 characters, the limit) for 10 s,
 *              while /healthz is asked every 100 ms: whether the event loop
 *              stays free (its latency, against the same probe idle)
 *
 * Exits non-zero if any request failed or answered 5xx, if a created
 * Patient was not delivered exactly once, or a signature did not hold.
 * The API's per-key rate limit is raised for the run: one key makes all
 * the requests, and the default (6,000 a minute) would answer 429s.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import { Command } from 'commander';
import { request } from 'undici';
import { startBenchReceiver, type Receipt } from './support/bench-receiver.ts';
import { createScratchDatabase } from './support/scratch-database.ts';
import { percentile } from './support/statistics.ts';
import { freePort, until } from './support/waiting.ts';

const options = new Command('npm run bench:api --')
  .description('The HTTP API under load, with the deliveries it causes.')
  .option('--duration <seconds>', 'length of the load', '30')
  .option('--connections <n>', 'concurrent connections of the load', '100')
  .parse()
  .opts<{ duration: string; connections: string }>();

const secret = randomBytes(16).toString('hex');
const apiKey = `bench-${randomBytes(16).toString('hex')}`;

async function main(): Promise<number> {
  const database = await createScratchDatabase();
  const receiver = await startBenchReceiver(secret);
  const port = await freePort();
  const service = startService(database.url, port);
  const failures: string[] = [];
  try {
    const base = `http://127.0.0.1:${port}`;
    await until(
      async () =>
        (await request(`${base}/readyz`).then(
          (answer) => answer.statusCode,
          () => 0,
        )) === 200,
      60_000,
      'the service',
      100,
    );
    const receipts: Receipt[] = [];
    receiver.onReceipt((receipt) => receipts.push(receipt));
    const subscriptionId = await subscribe(base, receiver.port);
    await until(async () => receipts.some((receipt) => receipt.kind === 'handshake'), 30_000, 'the handshake', 100);
    await until(async () => (await readSubscription(base, subscriptionId)).status === 'active', 30_000, 'the activation', 100);

    // --- load ---
    const load = await autocannon({
      url: base,
      connections: Number(options.connections),
      duration: Number(options.duration),
      headers: { 'x-api-key': apiKey, 'content-type': 'application/fhir+json' },
      requests: [
        {
          method: 'POST',
          path: '/fhir/resources/Patient',
          body: JSON.stringify({ resourceType: 'Patient', active: true, name: [{ family: 'Loaded', given: ['Bench'] }] }),
        },
        { method: 'GET', path: '/fhir/resources/Patient?family=Loaded&_count=20' },
        { method: 'GET', path: `/fhir/resources/Subscription/${subscriptionId}` },
      ],
    });
    const loadEnded = Date.now();
    // What was stored: autocannon leaves uncounted the requests still in flight when the time is up.
    const created = await countPatients(base);
    const fiveHundreds = load['5xx'];
    console.log(
      `load: ${options.connections} connections for ${options.duration} s: ${load.requests.total} requests (${Math.round(load.requests.average)}/s), ` +
        `latency p50 ${load.latency.p50} ms, p99 ${load.latency.p99} ms, max ${load.latency.max} ms; ` +
        `errors ${load.errors}, timeouts ${load.timeouts}, non-2xx ${load.non2xx} (5xx ${fiveHundreds}); ${created} Patients created`,
    );
    if (load.errors > 0 || load.timeouts > 0) failures.push(`${load.errors} requests failed, ${load.timeouts} timed out`);
    if (load.non2xx > 0) failures.push(`${load.non2xx} answers were not 2xx: ${JSON.stringify(load.statusCodeStats)}`);

    // --- delivery ---
    const delivered = () => receipts.filter((receipt) => receipt.kind === 'resource');
    await until(async () => new Set(delivered().map((receipt) => receipt.id)).size >= created, 300_000, 'every created Patient delivered', 100).catch(
      (error: unknown) => {
        failures.push(String(error));
      },
    );
    const last = Math.max(...delivered().map((receipt) => receipt.receivedAt));
    const ids = delivered().map((receipt) => receipt.id);
    const duplicates = ids.length - new Set(ids).size;
    const badSignatures = receipts.filter((receipt) => !receipt.signatureOk).length;
    console.log(
      `delivery: ${new Set(ids).size} of ${created} created Patients delivered, the last ${(Math.max(0, last - loadEnded) / 1000).toFixed(1)} s after the load ended; ` +
        `${duplicates} duplicates, ${badSignatures} bad signatures`,
    );
    if (new Set(ids).size !== created) failures.push(`${created - new Set(ids).size} created Patients were not delivered`);
    if (duplicates > 0) failures.push(`${duplicates} Patients were delivered more than once`);
    if (badSignatures > 0) failures.push(`${badSignatures} signatures did not hold`);

    // --- costly searches and the event loop ---
    const idle = await probeHealth(base, 3_000, Promise.resolve());
    const longest = 'a'.repeat(1_024);
    // autocannon's instance is a thenable, not a Promise.
    const costly = Promise.resolve(
      autocannon({
        url: `${base}/fhir/resources/Patient?name:contains=${longest}&_count=1`,
        connections: 30,
        duration: 10,
        headers: { 'x-api-key': apiKey },
      }),
    );
    const busy = await probeHealth(base, 10_000, costly);
    const searches = await costly;
    console.log(
      `costly: 30 clients repeating name:contains= of 1,024 characters for 10 s: ${searches.requests.total} searches (p50 ${searches.latency.p50} ms, ` +
        `p99 ${searches.latency.p99} ms, non-2xx ${searches.non2xx}, errors ${searches.errors}); /healthz meanwhile p50 ${busy.p50} ms, max ${busy.max} ms ` +
        `(idle: p50 ${idle.p50} ms, max ${idle.max} ms)`,
    );
    if (searches.errors > 0 || searches['5xx'] > 0) failures.push(`costly searches: ${searches.errors} errors, ${searches['5xx']} 5xx`);
  } finally {
    service.kill('SIGINT');
    await new Promise((resolve) => service.once('exit', resolve));
    receiver.stop();
    await database.drop();
  }
  for (const failure of failures) console.error(`FAILED: ${failure}`);
  return failures.length === 0 ? 0 : 1;
}

function startService(databaseUrl: string, port: number) {
  const child = spawn(process.execPath, ['src/cli/main.ts', 'serve'], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      PORT: String(port),
      BOOTSTRAP_API_KEY: apiKey,
      SECRETS_ENCRYPTION_KEY: randomBytes(32).toString('base64'),
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      API_RATE_LIMIT_PER_MINUTE: '100000000',
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  return child;
}

async function subscribe(base: string, receiverPort: number): Promise<string> {
  const answer = await request(`${base}/fhir/resources/Subscription`, {
    method: 'POST',
    headers: { 'x-api-key': apiKey, 'content-type': 'application/fhir+json' },
    body: JSON.stringify({
      resourceType: 'Subscription',
      status: 'requested',
      criteria: 'Patient?family=Loaded',
      reason: 'bench:api',
      channel: { type: 'rest-hook', endpoint: `http://127.0.0.1:${receiverPort}/load`, payload: 'application/fhir+json', header: [`secret: ${secret}`] },
    }),
  });
  if (answer.statusCode !== 201) throw new Error(`the subscription was refused: ${answer.statusCode} ${await answer.body.text()}`);
  return ((await answer.body.json()) as { id: string }).id;
}

async function countPatients(base: string): Promise<number> {
  const answer = await request(`${base}/fhir/resources/Patient?family=Loaded&_summary=count`, { headers: { 'x-api-key': apiKey } });
  return ((await answer.body.json()) as { total: number }).total;
}

async function readSubscription(base: string, id: string): Promise<{ status: string }> {
  const answer = await request(`${base}/fhir/resources/Subscription/${id}`, { headers: { 'x-api-key': apiKey } });
  return ((await answer.body.json()) as { resource: { status: string } }).resource;
}

/** /healthz's latency, asked every 100 ms for `durationMs` (and until `during` settles). */
async function probeHealth(base: string, durationMs: number, during: Promise<unknown>): Promise<{ p50: number; max: number }> {
  const latencies: number[] = [];
  let settled = false;
  void during.finally(() => (settled = true));
  const end = Date.now() + durationMs;
  while (Date.now() < end || !settled) {
    const started = performance.now();
    await request(`${base}/healthz`).then((answer) => answer.body.dump());
    latencies.push(performance.now() - started);
    await sleep(100);
  }
  const sorted = latencies.sort((a, b) => a - b);
  return { p50: Math.round(percentile(sorted, 0.5) * 10) / 10, max: Math.round(sorted.at(-1)! * 10) / 10 };
}

process.exitCode = await main();
