import { readFileSync } from 'node:fs';
import pg from 'pg';
import { connectDatabase } from '../../../src/db/database.ts';
import { addTopics } from '../../../src/topics/store.ts';
import { wallNow } from '../../support/bench-receiver.ts';
import { percentile } from '../../support/statistics.ts';
import type { Row } from '../harness/table.ts';

/** The example topics, each "became finished": said with queryCriteria, and in FHIRPath (issue 36). */
const topics = [
  { criteria: 'queryCriteria', file: 'examples/topics/encounter-complete.json' },
  { criteria: 'fhirPathCriteria', file: 'examples/topics/encounter-complete-fhirpath.json' },
];

/**
 * What a topic's trigger costs a batch loader: a plain SQL UPDATE of 10,000
 * Encounters into finished, timed with one active subscription on an
 * example topic ("became finished": the previous version is read and both
 * tested, in the statement) and with none just before, the median of three
 * each; a row for each way of saying the trigger, one topic subscription at
 * a time. No worker runs meanwhile: the statement alone is timed. Checks
 * that each timed UPDATE recorded an event for exactly the 10,000 rows that
 * changed.
 */
export async function topicTriggerCost(url: string): Promise<Row[]> {
  const rows = 10_000;
  const database = connectDatabase(url, () => undefined);
  const writer = new pg.Client({ connectionString: url });
  await writer.connect();
  try {
    await writer.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Encounter', 'id', 'topic-bench-' || n, 'status', 'in-progress', 'class', jsonb_build_object('code', 'AMB'))
       FROM generate_series(1, $1::int) n`,
      [rows],
    );
    const finish = `UPDATE fhir.resources SET content = jsonb_set(content, '{status}', '"finished"') WHERE resource_type = 'Encounter' AND id LIKE 'topic-bench-%'`;
    const reopen = `UPDATE fhir.resources SET content = jsonb_set(content, '{status}', '"in-progress"') WHERE resource_type = 'Encounter' AND id LIKE 'topic-bench-%'`;
    const timeFinishing = async () => {
      const times: number[] = [];
      for (let run = 0; run < 3; run++) {
        const started = wallNow();
        await writer.query(finish);
        times.push(wallNow() - started);
        await writer.query(reopen);
      }
      return percentile(times, 0.5);
    };
    const measured: Row[] = [];
    for (const { criteria, file } of topics) {
      // Each topic against a baseline timed just before it: the rows before leave dead rows and events that slow both.
      const none = await timeFinishing();
      const topic = JSON.parse(readFileSync(file, 'utf8')) as { url: string };
      await addTopics(database.db, [topic]);
      // Active at once, as after its handshake; it never is called (no worker runs), and is switched off after.
      const { rows: subscription } = await writer.query<{ id: string }>(
        `INSERT INTO webhook.subscriptions (status, criteria, topic_id, topic_filter, filter_criteria, payload_content, compiled_criteria, endpoint, headers_encrypted, signing_secret_encrypted, secret_is_generated, reason)
         SELECT 'active', url, id, '{}', '{}', 'id-only', '{}', 'http://127.0.0.1:9/bench', '\\x00', '\\x00', true, 'bench'
         FROM webhook.subscription_topics WHERE url = $1
         RETURNING id`,
        [topic.url],
      );
      const one = await timeFinishing();
      const { rows: recorded } = await writer.query<{ events: number }>(
        `SELECT count(*)::int AS events FROM webhook.subscription_events WHERE subscription_id = $1`,
        [subscription[0]!.id],
      );
      await writer.query(`UPDATE webhook.subscriptions SET status = 'off', ended_at = now() WHERE id = $1`, [subscription[0]!.id]);
      const exact = recorded[0]!.events === 3 * rows;
      measured.push({
        row: `topic trigger (${criteria}): a plain SQL UPDATE of ${rows.toLocaleString('en-US')} Encounters into finished, 1 topic subscription vs none`,
        figure: one / none,
        unit: '×',
        target: '≤ 2×, an event per row changed',
        met: one / none <= 2 && exact,
        checks: `median ${none.toFixed(0)} ms with none, ${one.toFixed(0)} ms with one; ${recorded[0]!.events.toLocaleString('en-US')} events for 3 UPDATEs`,
      });
    }
    return measured;
  } finally {
    await writer.end();
    await database.close();
  }
}
