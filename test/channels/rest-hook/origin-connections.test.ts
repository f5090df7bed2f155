import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/index.ts';
import { startWorkers } from '../../../src/dispatch/worker.ts';
import { baseUrl, startTestApp, testSecretsKey } from '../../support/app.ts';
import { listenOnLoopback, waitFor } from '../../support/receiver.ts';
import { subscribe, untilStatus } from '../../support/subscriptions.ts';

/**
 * DELIVERY_MAX_CONNECTIONS_PER_ORIGIN against one real receiver origin
 * (127.0.0.1 and one port) that serves several subscriptions: one of them
 * hangs, the others answer.
 */

/** Things to close after each test, newest first. */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * A server (for listenOnLoopback) that answers each handshake (a Bundle) 200 and hands every other
 * call, its body read and parsed, to `notification`.
 */
function handshakingServer(notification: (request: IncomingMessage, response: ServerResponse, json: { id: string }) => void): Server {
  return createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const json = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceType: string; id: string };
      if (json.resourceType === 'Bundle') return void response.writeHead(200).end();
      notification(request, response, json);
    });
  });
}

describe('connections to one origin', () => {
  it('stay within the cap, and a hanging subscription there does not hold up the others', { timeout: 120_000 }, async () => {
    const maxConnections = 4;
    const parallelCalls = 2;
    const t = await startTestApp();
    cleanups.push(() => t.close());
    const config = loadConfig({
      BASE_URL: baseUrl,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      DELIVERY_MAX_CONNECTIONS_PER_ORIGIN: String(maxConnections),
      DELIVERY_PARALLEL_CALLS: String(parallelCalls),
      // Longer than this test: the hanging calls cannot time out and free their connections while it runs.
      DELIVERY_RESPONSE_TIMEOUT_MS: '120000',
    });

    // One origin: /hang answers the handshake and holds every notification; /answer/<n> answers
    // each call after 200 ms, so that the answering subscriptions' calls overlap: uncapped, the
    // calls take 2 + 4 × 2 = 10 connections at once, beside those the handshakes left open.
    let open = 0;
    let mostOpen = 0;
    const held: Socket[] = [];
    const delivered = new Map<string, number>();
    const server = handshakingServer((request, response, json) => {
      if (request.url === '/hang') return void held.push(request.socket);
      delivered.set(json.id, (delivered.get(json.id) ?? 0) + 1);
      setTimeout(() => response.writeHead(200).end(), 200);
    });
    server.on('connection', (socket) => {
      mostOpen = Math.max(mostOpen, ++open);
      socket.on('close', () => open--);
    });
    const receiver = await listenOnLoopback(server);
    cleanups.push(receiver.close);
    const origin = `http://127.0.0.1:${receiver.port}`;

    const workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
    cleanups.push(() => workers.stop());
    // Before the workers stop: the held calls fail at once.
    cleanups.push(async () => held.forEach((socket) => socket.destroy()));

    const answering = 4;
    const hangingId = (await subscribe(t, 'Observation?code=hang', `${origin}/hang`)).id;
    const answeringIds: string[] = [];
    for (let n = 1; n <= answering; n++) answeringIds.push((await subscribe(t, `Encounter?class=answer-${n}`, `${origin}/answer/${n}`)).id);
    for (const id of [hangingId, ...answeringIds]) await untilStatus(t, id, 'active', 30_000);

    // The hanging subscription's events: it takes its DELIVERY_PARALLEL_CALLS connections and keeps them.
    await t.database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Observation', 'id', 'hang-' || k, 'status', 'final',
                                 'code', jsonb_build_object('coding', jsonb_build_array(jsonb_build_object('code', 'hang'))))
       FROM generate_series(1, 10) k`,
    );
    await waitFor(() => (held.length === parallelCalls ? true : undefined), 30_000, `${parallelCalls} held calls`);

    // Then 8 events for each answering subscription, all at once.
    const perSubscription = 8;
    await t.database.pool.query(
      `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Encounter', 'id', 'answer-' || n || '-' || k, 'status', 'finished',
                                 'class', jsonb_build_object('code', 'answer-' || n))
       FROM generate_series(1, $1::int) n, generate_series(1, $2::int) k`,
      [answering, perSubscription],
    );
    const expected = answeringIds.length * perSubscription;
    // At two connections for 32 calls of 200 ms, about 3.2 s; the hanging calls would free theirs after 120 s.
    await waitFor(() => (delivered.size === expected ? true : undefined), 60_000, `${expected} events delivered`);

    expect([...delivered.values()].every((count) => count === 1)).toBe(true);
    // Delivered while the hanging subscription still held its connections, and it never got more.
    expect(held).toHaveLength(parallelCalls);
    expect(held.filter((socket) => socket.destroyed)).toEqual([]);
    expect(mostOpen).toBe(maxConnections);
  });

  it(
    'give a subscription waiting at a full origin the next free place, before the waiting calls of those that hold places there',
    { timeout: 120_000 },
    async () => {
      const t = await startTestApp();
      cleanups.push(() => t.close());
      const config = loadConfig({
        BASE_URL: baseUrl,
        WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
        DELIVERY_MAX_CONNECTIONS_PER_ORIGIN: '4',
        DELIVERY_PARALLEL_CALLS: '2',
      });

      // One origin: /crawl/<n> answers each notification after 1 s, /quick at once. Every call's path, in order of arrival.
      const arrivals: string[] = [];
      const server = handshakingServer((request, response) => {
        arrivals.push(request.url!);
        setTimeout(() => response.writeHead(200).end(), request.url!.startsWith('/crawl/') ? 1_000 : 0);
      });
      const receiver = await listenOnLoopback(server);
      cleanups.push(receiver.close);
      const origin = `http://127.0.0.1:${receiver.port}`;
      const workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
      cleanups.push(() => workers.stop());

      const crawling = 4;
      const ids: string[] = [];
      for (let n = 1; n <= crawling; n++) ids.push((await subscribe(t, `Encounter?class=crawl-${n}`, `${origin}/crawl/${n}`)).id);
      ids.push((await subscribe(t, 'Encounter?class=quick', `${origin}/quick`)).id);
      for (const id of ids) await untilStatus(t, id, 'active', 30_000);

      // 6 events for each crawling subscription: 8 lanes for 4 places, so 4 calls wait at the origin.
      await t.database.pool.query(
        `INSERT INTO fhir.resources (content)
       SELECT jsonb_build_object('resourceType', 'Encounter', 'id', 'crawl-' || n || '-' || k, 'status', 'finished', 'class', jsonb_build_object('code', 'crawl-' || n))
       FROM generate_series(1, $1::int) n, generate_series(1, 6) k`,
        [crawling],
      );
      await waitFor(() => (arrivals.length === 4 ? true : undefined), 30_000, 'the first 4 calls');
      // The quick subscription's event, while the 4 places are held and the other crawling calls wait for them.
      await t.fhir('POST', '/Encounter', { resourceType: 'Encounter', id: 'quick', status: 'finished', class: { code: 'quick' } });
      await waitFor(() => (arrivals.includes('/quick') ? true : undefined), 30_000, 'the quick call');
      // Only the crawling subscriptions that had no place yet (as few in flight as it, and waiting longer) come first;
      // first come, first served, it would have come after the 4 crawling calls that waited before it.
      const withoutPlace = crawling - new Set(arrivals.slice(0, 4)).size;
      expect(arrivals.slice(4).indexOf('/quick')).toBeLessThanOrEqual(withoutPlace);
    },
  );

  it('are taken one at a time by a subscriber whose calls failed lately, new events included, until one is delivered', { timeout: 120_000 }, async () => {
    const t = await startTestApp();
    cleanups.push(() => t.close());
    const config = loadConfig({
      BASE_URL: baseUrl,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      DELIVERY_PARALLEL_CALLS: '4',
      DELIVERY_RESPONSE_TIMEOUT_MS: '500',
      // Retries not due while the test runs: the second round is new events only.
      DELIVERY_RETRY_DELAYS_MS: '60000,60000',
    });
    // Answers handshakes; holds every notification (until the 500 ms timeout), counting those held at once.
    let held = 0;
    let mostHeld = 0;
    let calls = 0;
    const server = handshakingServer((request) => {
      calls += 1;
      mostHeld = Math.max(mostHeld, ++held);
      request.socket.on('close', () => held--);
    });
    const receiver = await listenOnLoopback(server);
    cleanups.push(receiver.close);
    const workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }));
    cleanups.push(() => workers.stop());
    const { id } = await subscribe(t, 'Encounter?class=stalled', `http://127.0.0.1:${receiver.port}/stalled`);
    await untilStatus(t, id, 'active', 30_000);
    const write = (round: number) =>
      t.database.pool.query(
        `INSERT INTO fhir.resources (content)
         SELECT jsonb_build_object('resourceType', 'Encounter', 'id', 'stalled-' || $1::int || '-' || k, 'status', 'finished', 'class', jsonb_build_object('code', 'stalled'))
         FROM generate_series(1, 4) k`,
        [round],
      );

    // Its first events go 4 at a time, as it has not failed yet; they time out, to be retried in a minute.
    await write(1);
    await waitFor(() => (calls === 4 && held === 0 ? true : undefined), 30_000, 'the first 4 calls, timed out');
    expect(mostHeld).toBe(4);
    // New events while it is failing: one call, which times out too, and the others wait with it.
    mostHeld = 0;
    await write(2);
    await waitFor(() => (calls === 5 && held === 0 ? true : undefined), 30_000, 'one more call, timed out');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(calls).toBe(5);
    expect(mostHeld).toBe(1);
  });
});
