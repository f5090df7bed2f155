import { once } from 'node:events';
import { createServer, type AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** A TCP port free on 127.0.0.1 now, for a process the script starts to listen on. */
export async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  server.close();
  await once(server, 'close');
  return port;
}

/** Waits until `check` says yes, asking every `intervalMs`; throws after `timeoutMs`, naming `what`. */
export async function until(check: () => Promise<boolean>, timeoutMs: number, what: string, intervalMs = 20): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(intervalMs);
  }
}
