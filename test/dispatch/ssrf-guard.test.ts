import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { closedAtFileEnd, stackWith } from '../support/dispatch-stack.ts';
import { attemptsOf, statusOf, subscribe, untilStatus } from '../support/subscriptions.ts';

const { receiver } = closedAtFileEnd();

/** Whether `localhost` is resolved from /etc/hosts before any DNS server is asked. */
function localhostFromHostsFile(): boolean {
  const read = (file: string) => {
    try {
      return readFileSync(file, 'utf8');
    } catch {
      return undefined;
    }
  };
  const hosts = read('/etc/hosts') ?? '';
  const mapped = hosts.split('\n').some((line) => /^\s*(127\.\d+\.\d+\.\d+|::1)\s+(.*\s)?localhost(\s|$)/.test(line.replace(/#.*/, '') + ' '));
  const order = /^hosts:\s*(.*)$/m.exec(read('/etc/nsswitch.conf') ?? 'hosts: files dns')?.[1]?.split(/\s+/) ?? [];
  return mapped && order[0] === 'files';
}

describe('SSRF guard on (WEBHOOK_ALLOW_PRIVATE_NETWORKS unset)', () => {
  const stack = stackWith(() => ({ DELIVERY_RETRY_DELAYS_MS: '50,50' }));

  it('never reaches a loopback receiver: the handshake is recorded as failed and the subscription is in error with the reason', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const { id } = await subscribe(t, 'Practitioner?active=true', endpoint.url);
    await untilStatus(t, id, 'error');

    const { error } = await statusOf(t, id);
    expect(error).toMatch(/^Handshake failed: /);
    expect(error).toContain("refused: the endpoint's address is not public (loopback)");
    expect(error).toContain(endpoint.url);
    // A refused address is permanent: one attempt, no retry.
    expect(await attemptsOf(t, id)).toEqual([
      {
        kind: 'handshake',
        attempt: 1,
        outcome: 'failed',
        http_status: null,
        error: expect.stringContaining("the endpoint's address is not public (loopback)"),
        resource_id: null,
        duration_ms: expect.any(Number),
      },
    ]);
    await sleep(300);
    expect(endpoint.calls).toHaveLength(0);
  });

  // Only where the hosts file answers for localhost: a lookup must never reach a DNS server off loopback.
  it.skipIf(!localhostFromHostsFile())('refuses a host name that resolves to loopback too (the lookup path, not only IP literals)', async () => {
    const { t } = stack.current();
    const endpoint = await receiver();
    const byName = endpoint.url.replace('127.0.0.1', 'localhost');
    const { id } = await subscribe(t, 'Practitioner?active=false', byName);
    await untilStatus(t, id, 'error');
    // The subscriber learns that the address is not public, not which address the name resolved to (the operator's log says).
    const { error } = await statusOf(t, id);
    expect(error).toContain("the endpoint's address is not public (loopback)");
    expect(error).not.toMatch(/127\.0\.0\.1|::1/);
    expect(await attemptsOf(t, id)).toMatchObject([{ kind: 'handshake', attempt: 1, outcome: 'failed', http_status: null }]);
    expect(endpoint.calls).toHaveLength(0);
  });
});
