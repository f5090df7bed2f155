import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { createApiKey } from '../../../src/auth/api-keys.ts';
import { submitSubscription } from '../../../src/subscriptions/store.ts';
import { addExampleTopic, committedAt } from '../harness/deliveries.ts';
import { until } from '../../support/waiting.ts';
import type { Bench } from '../harness/dispatcher.ts';
import { secret } from '../harness/run.ts';
import type { Row } from '../harness/table.ts';

/**
 * Several events per notification (issue 28): a topic-based subscription
 * (the example topic, id-only) drains `events` finished Encounters written
 * in ONE statement, one event per call (no max-count, one call at a time),
 * then another subscription the same count with backport-max-count 100:
 * events/s from the commit to the last notification, and the calls each
 * took. Every event is checked to arrive once, in number order, in calls
 * of at most max-count events, validly signed.
 */
export async function topicDrain(bench: Bench, events: number): Promise<Row> {
  const topic = await addExampleTopic(bench);
  const single = await topicDrainRate(bench, topic, events, undefined);
  const batched = await topicDrainRate(bench, topic, events, 100);
  const told = ({ rate, calls }: { rate: number; calls: number }) =>
    `${Math.round(rate).toLocaleString('en-US')} events/s in ${calls.toLocaleString('en-US')} calls`;
  return {
    row: `max-count: a topic drain of ${events.toLocaleString('en-US')} events of one statement, max-count 100 vs 1`,
    figure: batched.rate / single.rate,
    unit: '×',
    checks: `max-count 1: ${told(single)}; max-count 100: ${told(batched)}; ${single.checks}; ${batched.checks}`,
  };
}

/** One topic-based subscription's drain (see topicDrain): its events/s, its calls, and what did not arrive as it should. */
async function topicDrainRate(
  bench: Bench,
  topic: string,
  events: number,
  maxCount: number | undefined,
): Promise<{ rate: number; calls: number; checks: string }> {
  const ig = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';
  const patient = `topic-drain-${maxCount ?? 1}`;
  const path = `/topic/${randomBytes(4).toString('hex')}`;
  const { id: apiKeyId } = await createApiKey(bench.database.db, 'bench');
  const { resource } = await submitSubscription(
    bench.database.db,
    bench.context,
    {
      resourceType: 'Subscription',
      status: 'requested',
      criteria: topic,
      _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: `Encounter?patient=Patient/${patient}` }] },
      reason: 'bench',
      channel: {
        ...(maxCount === undefined ? {} : { extension: [{ url: `${ig}/backport-max-count`, valuePositiveInt: maxCount }] }),
        type: 'rest-hook',
        endpoint: `http://127.0.0.1:${bench.receiver.port}${path}`,
        payload: 'application/fhir+json',
        _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'id-only' }] },
        header: [`secret: ${secret}`],
      },
    },
    { apiKeyId, admin: true },
  );
  const id = (resource as { id: string }).id;
  await until(
    async () => (await bench.database.pool.query(`SELECT 1 FROM webhook.subscriptions WHERE id = $1 AND status = 'active'`, [id])).rowCount === 1,
    30_000,
    'the handshake',
  );
  const seen = new Set<number>();
  let calls = 0;
  let duplicates = 0;
  let outOfOrder = 0;
  let oversized = 0;
  let badSignatures = 0;
  let highest = 0;
  let last = 0;
  bench.receiver.onReceipt((receipt) => {
    if (receipt.kind !== 'notification' || receipt.path !== path) return;
    calls++;
    if (!receipt.signatureOk) badSignatures++;
    if (receipt.eventNumbers.length > (maxCount ?? 1)) oversized++;
    for (const number of receipt.eventNumbers) {
      if (seen.has(number)) duplicates++;
      if (number <= highest) outOfOrder++;
      seen.add(number);
      highest = Math.max(highest, number);
    }
    last = Math.max(last, receipt.receivedAt);
  });
  const committed = await committedAt(
    bench.database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Encounter', 'id', $2 || '-' || n, 'status', 'finished', 'class', jsonb_build_object('code', 'AMB'),
                                 'subject', jsonb_build_object('reference', 'Patient/' || $2))
       FROM generate_series(1, $1::int) n`,
      [events, patient],
    ),
  );
  await until(async () => seen.size >= events, 60_000 + events * 5, `${events} topic events`);
  await sleep(500);
  await bench.database.pool.query(`UPDATE webhook.subscriptions SET status = 'off', ended_at = now() WHERE id = $1`, [id]);
  const missing = Array.from({ length: events }, (_, n) => n + 1).filter((number) => !seen.has(number)).length;
  return {
    rate: events / ((last - committed) / 1000),
    calls,
    checks: `max-count ${maxCount ?? 1}: ${events} events: ${missing} missing, ${duplicates} duplicates, ${outOfOrder} out of order, ${oversized} calls over max-count, ${badSignatures} bad signatures`,
  };
}
