import type { StoredMsg } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestApp } from '../../support/app.ts';
import { brokerChannel, brokerSubscription, currentStatus, startBrokerTestApp, subscribed, untilAttempt, type BrokerTestApp } from '../../support/brokers.ts';
import { createTestStream, startOwnNatsServer, type OwnNatsServer, type TestStream } from '../../support/nats.ts';
import { waitFor } from '../../support/receiver.ts';
import { attemptsOf, untilStatus } from '../../support/subscriptions.ts';

/**
 * Notifications and the largest message a NATS server takes (its
 * max_payload; 1 MiB by default, 16 KiB on this file's own server), or a
 * stream (its max_msg_size): a topic-based subscription's run of events
 * whose notification would be larger goes as smaller runs, every event once and in number order; one
 * event whose notification alone is too large is refused for good, saying
 * its size, and the next events go on.
 */

const ig = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';
const maxPayload = 16 * 1024;
const streamMaxMessageSize = 8 * 1024;

let server: OwnNatsServer;
let stream: TestStream;
/** A stream that takes messages of 8 KiB at most. */
let smallStream: TestStream;
let t: TestApp;
let app: BrokerTestApp;

beforeAll(async () => {
  server = await startOwnNatsServer({ maxPayload });
  stream = await createTestStream(server.url);
  smallStream = await createTestStream(server.url, { maxMessageSize: streamMaxMessageSize });
  app = await startBrokerTestApp(
    { own: { type: 'nats-jetstream', url: server.url, subjects: [`${stream.prefix}.>`, `${smallStream.prefix}.>`] } },
    { DELIVERY_RESPONSE_TIMEOUT_MS: '2000' },
  );
  t = app.t;
});
afterAll(async () => {
  await app?.close();
  await stream?.close();
  await smallStream?.close();
  await server?.close();
});

/** Finished encounters of `patient`, each with a reason of `reasonLength` characters, written by one statement: claimed together. */
async function writeFinished(patient: string, ids: string[], reasonLength: number): Promise<void> {
  await t.database.pool.query(
    `INSERT INTO fhir.resources (content)
     SELECT jsonb_build_object('resourceType', 'Encounter', 'id', id, 'status', 'finished', 'class', jsonb_build_object('code', 'AMB'),
                               'subject', jsonb_build_object('reference', 'Patient/' || $2::text),
                               'reasonCode', jsonb_build_array(jsonb_build_object('text', repeat('r', $3::int))))
     FROM unnest($1::text[]) id`,
    [ids, patient, reasonLength],
  );
}

describe('a NATS server that takes 16 KiB at most', () => {
  it.each([
    // Ten of 3 KB: more than the server takes.
    ["the server's max_payload", () => stream, maxPayload, 3_000],
    // Ten of 1.5 KB: less than the server takes, more than the stream does.
    ["a stream's max_msg_size, below the server's", () => smallStream, streamMaxMessageSize, 1_500],
  ])(
    'splits a run of ten resources larger than %s into smaller notifications, each within it, every event once and in order',
    async (_what, streamOf, limit, reasonLength) => {
      const destination = streamOf();
      const patient = `size-runs-${limit}`;
      const channel = brokerChannel('nats-jetstream', `nats-jetstream://own/${destination.prefix}.runs`, {
        extension: [{ url: `${ig}/backport-max-count`, valuePositiveInt: 10 }],
        _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'full-resource' }] },
      });
      const id = await subscribed(t, brokerSubscription(patient, channel));
      await untilStatus(t, id, 'active');
      const ids = Array.from({ length: 10 }, (_, n) => `${patient}-${n + 1}`);
      await writeFinished(patient, ids, reasonLength);
      // The handshake, then the ten events in two notifications or more.
      const encountersOf = (message: StoredMsg) =>
        message
          .json<{ entry: { resource: { resourceType: string; id?: string } }[] }>()
          .entry.filter((entry) => entry.resource.resourceType === 'Encounter')
          .map((entry) => entry.resource.id);
      const notifications = await waitFor(
        async () => {
          const sent = (await destination.messages(1)).filter((message) => message.subject === `${destination.prefix}.runs`).slice(1);
          return sent.flatMap(encountersOf).length >= 10 ? sent : undefined;
        },
        15_000,
        'the ten events',
      );
      // Each once; in number order: each notification's last event number is higher than the one before.
      expect(notifications.flatMap(encountersOf).sort()).toEqual([...ids].sort());
      const lastNumbers = notifications.map((message) => Number(message.header.get('Fhir-Last-Event-Number')));
      expect(lastNumbers).toEqual([...lastNumbers].sort((x, y) => x - y));
      expect(new Set(lastNumbers).size).toBe(lastNumbers.length);
      expect(notifications.length).toBeGreaterThan(1);
      expect(notifications.every((message) => message.data.length <= limit)).toBe(true);
      const attempts = await attemptsOf(t, id);
      expect(attempts.filter((attempt) => attempt.outcome !== 'delivered')).toEqual([]);
    },
  );

  it('refuses for good one event whose notification alone is too large, saying its size, and sends the next', async () => {
    const channel = brokerChannel('nats-jetstream', `nats-jetstream://own/${stream.prefix}.large`, {
      _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'full-resource' }] },
    });
    const id = await subscribed(t, brokerSubscription('size-large', channel));
    await untilStatus(t, id, 'active');
    await writeFinished('size-large', ['size-large-1'], 20_000);
    const refused = await untilAttempt(t, id, 'failed');
    expect(refused.error).toMatch(/^the notification is \d+ bytes, more than the broker own takes/);
    await writeFinished('size-large', ['size-large-2'], 100);
    await untilAttempt(t, id, 'delivered');
    expect(await currentStatus(t, id)).toBe('active');
  });
});
