import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { WebSocket } from 'ws';
import { createApiKey } from '../../../src/auth/api-keys.ts';
import { websocketUrl } from '../../../src/channels/websocket/channel.ts';
import { submitSubscription } from '../../../src/subscriptions/store.ts';
import { wallNow } from '../../support/bench-receiver.ts';
import { percentile } from '../../support/statistics.ts';
import { until } from '../../support/waiting.ts';
import { addExampleTopic } from '../harness/deliveries.ts';
import type { Bench } from '../harness/dispatcher.ts';
import { commitClock, latencyRow, pacedWrites, type CommitClock } from '../harness/latencies.ts';
import type { Row } from '../harness/table.ts';

/**
 * Websocket frames (issue 35): `subscriptions` websocket subscriptions on the
 * example topic (id-only, each on a patient of its own), `clientsEach` real
 * websocket clients bound to each with a token of $get-ws-binding-token, on
 * the API the column runs (this process's for `worker`, the serve process's
 * for `serve`); then single-row writes at 50 per second for 10 s, each
 * matching one subscription in turn. Commit (the write's acknowledgement) →
 * each bound client's receipt of the frame naming it, and the same for each
 * subscription's first frame, the one whose notification path is cold. Every
 * client is checked to get each event of its subscription once, in number
 * order.
 *
 * With `servers` 2, each subscription's clients are bound in turn to the
 * column's API and to a second API server that the bench runs in its own
 * process (two processes for `serve`; for `worker`, two servers in the
 * bench's process that share only the database): each relays the frames
 * from webhook.websocket_notifications to its own clients.
 */
export async function websocketFrames(bench: Bench, subscriptions: number, clientsEach: number, servers: 1 | 2 = 1): Promise<Row[]> {
  const writes = 500;
  // Ids of their own for each variant, run one after the other on one database.
  const prefix = servers === 2 ? 'websocket-two' : 'websocket';
  const apis = [await bench.openListeningApi(), ...(servers === 2 ? [await bench.openOwnListeningApi()] : [])];
  const clients: BoundClient[] = [];
  const frames = commitClock();
  const firstFrames = commitClock();
  try {
    const topic = await addExampleTopic(bench);
    const ids: string[] = [];
    for (let k = 1; k <= subscriptions; k++) {
      // A key per subscription: one key's clients are at most WEBSOCKET_MAX_CONNECTIONS_PER_KEY (20).
      const { id: apiKeyId, key } = await createApiKey(bench.database.db, 'bench');
      const id = await websocketSubscription(bench, topic, `Patient/${prefix}-${k}`, apiKeyId);
      ids.push(id);
      // One at a time: an address holds at most WEBSOCKET_MAX_UNBOUND_PER_ADDRESS (10) connections not yet bound.
      for (let c = 0; c < clientsEach; c++) {
        const { origin } = apis[c % apis.length]!;
        clients.push(await bindClient(websocketUrl(origin), await bindingToken(origin, key, id), frames, firstFrames));
      }
    }
    await pacedWrites(
      bench,
      (n) => ({
        resourceType: 'Encounter',
        id: `${prefix}-${n}`,
        status: 'finished',
        class: { code: 'AMB' },
        subject: { reference: `Patient/${prefix}-${((n - 1) % subscriptions) + 1}` },
      }),
      (id) => {
        frames.acknowledged(id);
        firstFrames.acknowledged(id);
      },
      writes,
      50,
    );
    const events = writes / subscriptions;
    // A frame that never comes is reported as missing, not waited for: the row ends 30 s after the last write at most.
    await until(async () => clients.every((client) => client.seen.size >= events), 30_000, 'every frame').catch(() => undefined);
    // Late duplicates, if any, are counted too.
    await sleep(500);
    await bench.database.pool.query(`UPDATE webhook.subscriptions SET status = 'off', ended_at = now() WHERE id = ANY($1)`, [ids]);
    const checks = frameChecks(clients, events);
    const across = servers === 2 ? ', across two API servers' : '';
    const label = `websocket${across}: ${clients.length} bound clients on ${subscriptions} subscriptions at 50 writes/s`;
    const perFrame = latencyRow(label, frames.latencies, 25, 'frame');
    const worstFirst = Math.max(...firstFrames.latencies);
    return [
      { ...perFrame, met: perFrame.met === true && checks.clean, checks: `${perFrame.checks}; ${checks.told}` },
      {
        row: `websocket first frame${across}: commit of a just-bound subscription's first write → its first frame, worst of ${clients.length} clients`,
        figure: worstFirst,
        unit: 'ms',
        target: '≤ 50 ms',
        met: worstFirst <= 50 && firstFrames.latencies.length === clients.length,
        checks: `p50 ${percentile(firstFrames.latencies, 0.5).toFixed(1)} ms, max ${worstFirst.toFixed(1)} ms over ${firstFrames.latencies.length} first frames of ${clients.length} clients`,
      },
    ];
  } finally {
    await Promise.all(clients.map((client) => client.close()));
    for (const api of apis) await api.close();
  }
}

/** A websocket subscription on `topic` for `patient`'s Encounters, id-only, as the client of `apiKeyId` creates it (active at once: no handshake call). */
async function websocketSubscription(bench: Bench, topic: string, patient: string, apiKeyId: string): Promise<string> {
  const ig = 'http://hl7.org/fhir/uv/subscriptions-backport/StructureDefinition';
  const { resource } = await submitSubscription(
    bench.database.db,
    bench.context,
    {
      resourceType: 'Subscription',
      status: 'requested',
      criteria: topic,
      _criteria: { extension: [{ url: `${ig}/backport-filter-criteria`, valueString: `Encounter?patient=${patient}` }] },
      reason: 'bench',
      channel: {
        type: 'websocket',
        payload: 'application/fhir+json',
        _payload: { extension: [{ url: `${ig}/backport-payload-content`, valueCode: 'id-only' }] },
      },
    },
    { apiKeyId, admin: false },
  );
  return (resource as { id: string }).id;
}

/** A token of $get-ws-binding-token for one subscription, asked of the API with its owner's key (a token binds one connection). */
async function bindingToken(origin: string, key: string, subscriptionId: string): Promise<string> {
  const response = await request(`${origin}/fhir/resources/Subscription/${subscriptionId}/$get-ws-binding-token`, { headers: { 'x-api-key': key } });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`$get-ws-binding-token answered ${response.statusCode}: ${text.slice(0, 300)}`);
  const parameters = JSON.parse(text) as { parameter: { name: string; valueString?: string }[] };
  return parameters.parameter.find((parameter) => parameter.name === 'token')!.valueString!;
}

/** A bound client: its handshake's latest number (the events after it are its), the numbers it got, what came twice or out of order. */
type BoundClient = {
  start: number;
  seen: Set<number>;
  highest: number;
  duplicates: number;
  outOfOrder: number;
  closedEarly: boolean;
  close: () => Promise<void>;
};

/** A notification frame: a Bundle whose first entry is the status, the Backport IG's R4 Parameters. */
type Frame = { entry?: { resource?: { parameter?: StatusParameter[] } }[] };
type StatusParameter = { name: string; valueCode?: string; valueString?: string; valueReference?: { reference: string }; part?: StatusParameter[] };

/**
 * Connects to `url`, binds with `token` and waits for the handshake (10 s at
 * most); then takes each notification frame's receipt time first thing, and
 * tells `frames` of each event it names (its focus's id), `firstFrames` of the
 * first event after the handshake.
 */
async function bindClient(url: string, token: string, frames: CommitClock, firstFrames: CommitClock): Promise<BoundClient> {
  const socket = new WebSocket(url);
  const closed = once(socket, 'close');
  const handshake = await new Promise<StatusParameter[]>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no websocket handshake within 10 s')), 10_000);
    socket.once('open', () => socket.send(`bind-with-token ${token}`));
    socket.once('error', (error) => reject(error));
    socket.once('message', (data: Buffer) => {
      clearTimeout(timer);
      const status = statusOf(JSON.parse(data.toString('utf8')) as Frame);
      if (valueOf(status, 'type') === 'handshake') resolve(status);
      else reject(new Error(`the bind was answered ${data.toString('utf8').slice(0, 300)}`));
    });
  }).catch((error: unknown) => {
    socket.terminate();
    throw error;
  });
  const start = Number(valueOf(handshake, 'events-since-subscription-start'));
  const client: BoundClient = {
    start,
    seen: new Set(),
    highest: start,
    duplicates: 0,
    outOfOrder: 0,
    closedEarly: false,
    close: async () => {
      socket.removeAllListeners('close');
      socket.close();
      await Promise.race([closed, sleep(2_000)]);
    },
  };
  socket.on('close', () => (client.closedEarly = true));
  socket.on('message', (data: Buffer) => {
    const receivedAt = wallNow();
    const status = statusOf(JSON.parse(data.toString('utf8')) as Frame);
    if (valueOf(status, 'type') !== 'event-notification') return;
    for (const event of status.filter((parameter) => parameter.name === 'notification-event')) {
      const number = Number(event.part!.find((part) => part.name === 'event-number')!.valueString);
      const focus = event.part!.find((part) => part.name === 'focus')!.valueReference!.reference;
      const id = focus.slice(focus.lastIndexOf('/') + 1);
      frames.received(id, receivedAt);
      if (number === client.start + 1) firstFrames.received(id, receivedAt);
      if (client.seen.has(number)) client.duplicates++;
      else if (number < client.highest) client.outOfOrder++;
      client.seen.add(number);
      client.highest = Math.max(client.highest, number);
    }
  });
  return client;
}

const statusOf = (frame: Frame): StatusParameter[] => frame.entry?.[0]?.resource?.parameter ?? [];
const valueOf = (status: StatusParameter[], name: string) => {
  const parameter = status.find((candidate) => candidate.name === name);
  return parameter?.valueCode ?? parameter?.valueString;
};

/** What did not arrive once and in order, over every client: each should get its subscription's `events` events, numbered on from its handshake. */
function frameChecks(clients: BoundClient[], events: number): { clean: boolean; told: string } {
  let missing = 0;
  let duplicates = 0;
  let outOfOrder = 0;
  let unexpected = 0;
  for (const client of clients) {
    for (let number = client.start + 1; number <= client.start + events; number++) if (!client.seen.has(number)) missing++;
    unexpected += [...client.seen].filter((number) => number <= client.start || number > client.start + events).length;
    duplicates += client.duplicates;
    outOfOrder += client.outOfOrder;
  }
  const closedEarly = clients.filter((client) => client.closedEarly).length;
  return {
    clean: missing + duplicates + outOfOrder + unexpected + closedEarly === 0,
    told: `${clients.length * events} frames: ${missing} missing, ${duplicates} duplicates, ${outOfOrder} out of order, ${unexpected} unexpected, ${closedEarly} clients closed early`,
  };
}
