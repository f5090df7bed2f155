import { readFileSync } from 'node:fs';
import pino from 'pino';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { addTopics } from '../../src/topics/store.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from './app.ts';
import { startReceiver, type Receiver } from './receiver.ts';

/** The example topic (examples/topics/encounter-complete.json): an Encounter that became finished. */
export const exampleTopicUrl = 'http://example.org/topics/encounter-complete';
/** Where the Backport IG's extensions are defined. */
export const backportIg = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';

export type TopicStack = {
  t: TestApp;
  workers: Workers;
  /** A receiver on loopback, closed with the stack. */
  receiver(): Promise<Receiver>;
  /** Stops the workers, then closes the receivers and the API's database. */
  close(): Promise<void>;
};

/**
 * For topic-based subscriptions: the API on a database of its own with the
 * example topic added, and workers configured by `settings` (BASE_URL and
 * loopback receivers always allowed).
 */
export async function startTopicStack(settings: Record<string, string> = {}): Promise<TopicStack> {
  const t = await startTestApp();
  const workers = await startWorkers(
    loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', ...settings }),
    t.database,
    testSecretsKey,
    pino({ level: 'silent' }),
  );
  await addTopics(t.database.db, [JSON.parse(readFileSync(new URL('../../examples/topics/encounter-complete.json', import.meta.url), 'utf8'))]);
  const receivers: Receiver[] = [];
  return {
    t,
    workers,
    async receiver() {
      const started = await startReceiver();
      receivers.push(started);
      return started;
    },
    async close() {
      await workers.stop();
      await Promise.all(receivers.map((receiver) => receiver.close()));
      await t.close();
    },
  };
}
