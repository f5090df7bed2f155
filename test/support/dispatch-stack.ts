import type { Server } from 'node:http';
import pino from 'pino';
import { afterAll, beforeAll } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers, type Workers } from '../../src/dispatch/worker.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from './app.ts';
import { listenOnLoopback, startReceiver, type Receiver } from './receiver.ts';

/**
 * For the dispatcher's edges, end to end (test/dispatch/): real PostgreSQL,
 * graphile-worker, HTTP receivers, an OAuth token endpoint and an SMTP
 * server, all on 127.0.0.1. Each describe has its own database and workers
 * with the configuration it needs, so that no job scheduled by one can be
 * run under another's settings.
 */
type Stack = { t: TestApp; workers: Workers };

/**
 * What a test file's tests start, closed once the whole file is done (after
 * every describe stopped its workers), newest first: call it at the file's
 * top level.
 */
export function closedAtFileEnd(): {
  /** Closes something once the file is done. */
  closeAtEnd: (cleanup: () => Promise<unknown>) => void;
  /** A receiver on 127.0.0.1. */
  receiver: () => Promise<Receiver>;
  /** A node:http server on 127.0.0.1 (closed with its connections); its port. */
  listen: (server: Server) => Promise<number>;
} {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterAll(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  const closeAtEnd = (cleanup: () => Promise<unknown>) => void cleanups.push(cleanup);
  return {
    closeAtEnd,
    async receiver() {
      const started = await startReceiver();
      closeAtEnd(() => started.close());
      return started;
    },
    async listen(server) {
      const { port, close } = await listenOnLoopback(server);
      closeAtEnd(close);
      return port;
    },
  };
}

/**
 * A test database and workers configured by `environment` (BASE_URL is always
 * the test one), read when the describe starts: after its earlier beforeAll
 * hooks, so it can name the ports of servers they started.
 */
export function stackWith(environment: () => Record<string, string>): { current: () => Stack } {
  let stack: Stack | undefined;
  beforeAll(async () => {
    const t = await startTestApp();
    const workers = await startWorkers(loadConfig({ BASE_URL: baseUrl, ...environment() }), t.database, testSecretsKey, pino({ level: 'silent' }));
    stack = { t, workers };
  });
  afterAll(async () => {
    await stack?.workers.stop();
    await stack?.t.close();
  });
  return { current: () => stack! };
}
