import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Answer as CheckedBody } from './r4-validation.ts';

/** Hands a call to the suite's R4 check of every body (test/support/validate-answers.ts, which puts it there). */
const recordBody = (body: CheckedBody) =>
  (globalThis as { [key: symbol]: ((body: CheckedBody) => void) | undefined })[Symbol.for('fhir-webhooks.r4-validation.record')]?.(body);

export type ReceivedCall = { headers: IncomingHttpHeaders; body: Buffer; json: Record<string, unknown> };

/** How the receiver answers a call: a status, and optionally headers and a delay before answering. */
export type Answer = { status: number; headers?: Record<string, string>; delayMs?: number };

export type Receiver = {
  url: string;
  calls: ReceivedCall[];
  /** Decides each answer; 200 unless changed. */
  answer: (call: ReceivedCall) => Answer;
  /** Resolves once `count` calls have arrived in all (or rejects after timeoutMs). */
  waitForCalls(count: number, timeoutMs?: number): Promise<ReceivedCall[]>;
  close(): Promise<void>;
};

/** A real HTTP subscriber endpoint on 127.0.0.1 that records what it receives; over https with `tls` (a key and certificate, PEM). */
export async function startReceiver({ tls }: { tls?: { key: string; cert: string } } = {}): Promise<Receiver> {
  const receiver: Receiver = {
    url: '',
    calls: [],
    answer: () => ({ status: 200 }),
    waitForCalls: (count, timeoutMs = 10_000) => waitFor(() => (receiver.calls.length >= count ? receiver.calls : undefined), timeoutMs, `${count} calls`),
    close: async () => undefined,
  };
  const handle = (request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = Buffer.concat(chunks);
      const call = { headers: request.headers, body, json: JSON.parse(body.toString('utf8') || '{}') as Record<string, unknown> };
      receiver.calls.push(call);
      const { status, headers, delayMs = 0 } = receiver.answer(call);
      const contentType = request.headers['content-type'];
      recordBody({ source: 'notification', method: request.method ?? 'POST', url: receiver.url, status, contentType, body: body.toString('utf8') });
      setTimeout(() => response.writeHead(status, headers).end(status >= 400 ? `refused with ${status}` : 'ok'), delayMs);
    });
  };
  const { port, close } = await listenOnLoopback(tls === undefined ? createServer(handle) : createTlsServer(tls, handle));
  receiver.url = `${tls === undefined ? 'http' : 'https'}://127.0.0.1:${port}/hook`;
  receiver.close = close;
  return receiver;
}

/** Listens on 127.0.0.1 at a free port; close() also ends the open connections. */
export async function listenOnLoopback(server: Server | TlsServer): Promise<{ port: number; close: () => Promise<void> }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A loopback port free at the time of asking: for a child process to listen on, or to find nothing listening. */
export async function freePort(): Promise<number> {
  const { port, close } = await listenOnLoopback(createServer());
  await close();
  return port;
}

/** Polls `check` until it returns a value. */
export async function waitFor<T>(check: () => T | undefined | Promise<T | undefined>, timeoutMs = 10_000, what = 'a condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
