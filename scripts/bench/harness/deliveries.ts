import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { createApiKey } from '../../../src/auth/api-keys.ts';
import { submitSubscription } from '../../../src/subscriptions/store.ts';
import { addTopics } from '../../../src/topics/store.ts';
import { wallNow, type Receipt } from '../../support/bench-receiver.ts';
import type { Bench } from './dispatcher.ts';
import { secret } from './run.ts';
import { until } from '../../support/waiting.ts';

/** The topic of the topic-based rows (Encounters that became finished, filtered by patient): its URL, once stored. */
export async function addExampleTopic(bench: Bench): Promise<string> {
  const [added] = await addTopics(bench.database.db, [JSON.parse(readFileSync('examples/topics/encounter-complete.json', 'utf8'))]);
  return added!.url;
}

/** The channel.header of every bench subscription: its `secret`, which signs its calls, the one the receiver checks them with. */
export const channelHeaders = [`secret: ${secret}`];

/** Creates subscriptions as a client does (their handshakes are the workers'), and waits until all are active. */
export async function subscribe(bench: Bench, criteria: string[], under = '/s'): Promise<string[]> {
  const paths = criteria.map(() => `${under}/${randomBytes(4).toString('hex')}`);
  const { id: apiKeyId } = await createApiKey(bench.database.db, 'bench');
  for (const [index, text] of criteria.entries()) {
    await submitSubscription(
      bench.database.db,
      bench.context,
      {
        resourceType: 'Subscription',
        status: 'requested',
        criteria: text,
        reason: 'bench',
        channel: {
          type: 'rest-hook',
          endpoint: `http://127.0.0.1:${bench.receiver.port}${paths[index]}`,
          payload: 'application/fhir+json',
          header: channelHeaders,
        },
      },
      { apiKeyId, admin: true },
    );
  }
  await until(
    async () =>
      (
        await bench.database.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM webhook.subscriptions WHERE status = 'active' AND criteria = ANY($1)`, [
          criteria,
        ])
      ).rows[0]!.n === criteria.length,
    30_000,
    'the handshakes',
  );
  return paths;
}

/**
 * Writes, then waits until every path got every id once: deliveries/s from
 * the write's first commit (the time `write` returns) to the last delivery,
 * and what did not arrive exactly once or was badly signed.
 */
export async function deliverAll(bench: Bench, paths: string[], ids: string[], write: () => Promise<number>): Promise<{ rate: number; checks: string }> {
  const expected = new Set(ids);
  const seen = new Map(paths.map((path) => [path, new Map<string, number>()]));
  let badSignatures = 0;
  let unexpected = 0;
  let received = 0;
  let last = 0;
  bench.receiver.onReceipt((receipt: Receipt) => {
    if (receipt.kind !== 'resource') return;
    const counts = seen.get(receipt.path);
    if (!counts || !expected.has(receipt.id)) return void unexpected++;
    if (!receipt.signatureOk) badSignatures++;
    counts.set(receipt.id, (counts.get(receipt.id) ?? 0) + 1);
    received++;
    last = Math.max(last, receipt.receivedAt);
  });
  const committed = await write();
  const total = paths.length * ids.length;
  await until(async () => [...seen.values()].every((counts) => counts.size === ids.length), 60_000 + total * 5, `${total} deliveries`);
  await sleep(500);
  const duplicates = received - total;
  const checks = `${total} deliveries: ${duplicates} duplicates, ${unexpected} unexpected, ${badSignatures} bad signatures`;
  return { rate: total / ((last - committed) / 1000), checks };
}

/** When a write's promise settles: its commit, as the writer sees it. */
export async function committedAt(write: Promise<unknown>): Promise<number> {
  await write;
  return wallNow();
}

/** Switches subscriptions off (as a client's PUT would), so that the rows after do not write events for them. */
export async function switchOff(bench: Bench, criteria: string[]): Promise<void> {
  await bench.database.pool.query(`UPDATE webhook.subscriptions SET status = 'off', ended_at = now() WHERE criteria = ANY($1) AND status <> 'off'`, [criteria]);
}

/** Transaction Bundles of `size` new resources, as an API client posts them. */
export function transactionBundle(resources: object[]): object {
  return {
    resourceType: 'Bundle',
    type: 'transaction',
    entry: resources.map((resource) => ({ resource, request: { method: 'POST', url: (resource as { resourceType: string }).resourceType } })),
  };
}
