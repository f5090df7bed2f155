import { fork } from 'node:child_process';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The benchmark's webhook receiver, in a process of its own so that what is
 * measured in the benchmark's process is the dispatcher. It answers 200 at
 * once, checks every signature against BENCH_SECRET, and reports each call
 * (batched per event-loop turn) over IPC: the path (one per subscription),
 * the resource id, version and lastUpdated (a topic-based notification: the
 * numbers of its events), whether the signature held, and when the body was
 * in (epoch ms, comparable across processes on one machine).
 * Under /hang/ it answers handshakes and never answers a notification: a
 * subscriber that hangs until the dispatcher's response timeout. During an
 * outage (setOutage), notifications under /flaky/ are answered 503 (their
 * handshakes 200), under /stall/ never, under /slow/ after 1.5 s.
 */

export type Receipt = {
  path: string;
  /** A classic notification (`resource`), a topic-based one's event notification (`notification`), or any other history Bundle (a handshake, a heartbeat). */
  kind: 'handshake' | 'resource' | 'notification';
  /** A topic-based notification's event numbers, in its order (none for the other kinds). */
  eventNumbers: number[];
  id: string;
  versionId: string;
  /** The resource's meta.lastUpdated as epoch ms, microseconds kept as the fraction (NaN without one). */
  lastUpdated: number;
  signatureOk: boolean;
  receivedAt: number;
};
type Message = { type: 'ready'; port: number } | { type: 'receipts'; batch: Receipt[] };
type Command = { type: 'outage'; on: boolean };

export const wallNow = () => performance.timeOrigin + performance.now();

export type BenchReceiver = {
  port: number;
  onReceipt: (handler: (receipt: Receipt) => void) => void;
  /** Starts or ends the outage of the /flaky/, /stall/ and /slow/ subscribers (the receiver has it before any call sent after the promise resolves, give or take its event loop). */
  setOutage: (on: boolean) => Promise<void>;
  stop: () => void;
};

/** Starts the receiver process; every call it gets is handed to the current onReceipt handler. */
export async function startBenchReceiver(secret: string): Promise<BenchReceiver> {
  const child = fork(import.meta.filename, [], {
    env: { ...process.env, BENCH_RECEIVER: '1', BENCH_SECRET: secret },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let handler: (receipt: Receipt) => void = () => undefined;
  const port = await new Promise<number>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`the receiver exited (${code})`)));
    child.on('message', (message: Message) => {
      if (message.type === 'ready') resolve(message.port);
      else for (const receipt of message.batch) handler(receipt);
    });
  });
  child.removeAllListeners('exit');
  const setOutage = (on: boolean) =>
    new Promise<void>((resolve, reject) => child.send({ type: 'outage', on } satisfies Command, (error) => (error ? reject(error) : resolve())));
  return { port, onReceipt: (next) => (handler = next), setOutage, stop: () => child.kill() };
}

function serve(secret: string): void {
  let outage = false;
  process.on('message', (command: Command) => {
    if (command.type === 'outage') outage = command.on;
  });
  let batch: Receipt[] = [];
  let flushing = false;
  const flush = () => {
    flushing = false;
    process.send?.({ type: 'receipts', batch } satisfies Message);
    batch = [];
  };
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const receivedAt = wallNow();
      const body = Buffer.concat(chunks);
      const handshake = body.includes('"handshake"');
      if (request.url?.startsWith('/hang/') || (outage && request.url?.startsWith('/stall/'))) {
        if (handshake) response.writeHead(200).end();
        return;
      }
      if (outage && !handshake && request.url?.startsWith('/flaky/')) return void response.writeHead(503).end();
      if (outage && !handshake && request.url?.startsWith('/slow/')) setTimeout(() => response.writeHead(200).end(), 1_500);
      else response.writeHead(200).end();
      const expected = Buffer.from(`sha256=${createHmac('sha256', secret).update(body).digest('hex')}`);
      const received = Buffer.from(String(request.headers['x-hub-signature'] ?? ''));
      const signatureOk = received.length === expected.length && timingSafeEqual(received, expected);
      const json = JSON.parse(body.toString('utf8')) as Notified;
      const eventNumbers = topicEventNumbers(json);
      const kind = json.resourceType === 'Bundle' && json.type === 'history' ? (eventNumbers.length > 0 ? 'notification' : 'handshake') : 'resource';
      const lastUpdated = json.meta?.lastUpdated === undefined ? Number.NaN : parseInstant(json.meta.lastUpdated);
      batch.push({
        path: request.url ?? '',
        kind,
        eventNumbers,
        id: json.id ?? '',
        versionId: json.meta?.versionId ?? '',
        lastUpdated,
        signatureOk,
        receivedAt,
      });
      if (!flushing) {
        flushing = true;
        setImmediate(flush);
      }
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1', () => process.send?.({ type: 'ready', port: (server.address() as AddressInfo).port } satisfies Message));
  process.on('disconnect', () => process.exit(0));
}

/** What the receiver reads of a body: a resource's id and meta, or a history Bundle's status Parameters first. */
type Notified = {
  resourceType?: string;
  type?: string;
  id?: string;
  meta?: { versionId?: string; lastUpdated?: string };
  entry?: { resource?: { parameter?: { name?: string; part?: { name?: string; valueString?: string }[] }[] } }[];
};

/** The event numbers of a topic-based notification's status (its notification-event parameters), in its order. */
function topicEventNumbers(json: Notified): number[] {
  const parameters = json.resourceType === 'Bundle' ? (json.entry?.[0]?.resource?.parameter ?? []) : [];
  return parameters
    .filter((parameter) => parameter.name === 'notification-event')
    .map((event) => Number(event.part?.find((part) => part.name === 'event-number')?.valueString));
}

/** A FHIR instant with microseconds (2026-01-01T09:00:00.123456Z) as epoch ms, keeping the fraction. */
function parseInstant(instant: string): number {
  const fraction = /\.(\d+)Z$/.exec(instant)?.[1] ?? '';
  return Date.parse(instant.replace(/\.\d+Z$/, 'Z')) + (fraction === '' ? 0 : Number(`0.${fraction}`) * 1000);
}

if (process.env.BENCH_RECEIVER === '1') serve(process.env.BENCH_SECRET ?? '');
