import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createDeliveryAgent, forbiddenAddressReason, ForbiddenAddressError } from '../../../src/channels/rest-hook/ssrf.ts';

// Pure checks: no connection is opened to any of these addresses.
describe('forbiddenAddressReason', () => {
  it.each([
    ['0.0.0.0', 'unspecified'],
    ['0.255.255.255', 'unspecified'],
    ['10.0.0.0', 'private network'],
    ['10.255.255.255', 'private network'],
    ['100.64.0.0', 'carrier-grade NAT'],
    ['100.127.255.255', 'carrier-grade NAT'],
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['169.254.169.254', 'link-local'],
    ['172.16.0.0', 'private network'],
    ['172.31.255.255', 'private network'],
    ['192.0.0.1', 'reserved'],
    ['192.0.2.10', 'documentation'],
    ['192.168.1.1', 'private network'],
    ['198.18.0.1', 'benchmarking'],
    ['198.19.255.255', 'benchmarking'],
    ['198.51.100.7', 'documentation'],
    ['203.0.113.200', 'documentation'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.255', 'multicast'],
    ['240.0.0.1', 'reserved'],
    ['255.255.255.255', 'reserved'],
  ])('refuses IPv4 %s (%s)', (address, reason) => {
    expect(forbiddenAddressReason(address)).toBe(reason);
  });

  it.each([
    ['::', 'unspecified'],
    ['::1', 'loopback'],
    ['0:0:0:0:0:0:0:1', 'loopback'],
    ['fc00::1', 'private network'],
    ['fdff:ffff::1', 'private network'],
    ['fe80::1', 'link-local'],
    ['fe80::1%eth0', 'link-local'],
    ['febf:ffff::1', 'link-local'],
    ['ff02::1', 'multicast'],
    ['FF05::2', 'multicast'],
    ['2001:db8::1', 'documentation'],
    ['2001:db8:ffff::1', 'documentation'],
    ['100::1', 'discard-only'],
    // Outside 2000::/3, where IANA allocates all global unicast.
    ['4000::1', 'reserved'],
    ['fec0::1', 'reserved'],
  ])('refuses IPv6 %s (%s)', (address, reason) => {
    expect(forbiddenAddressReason(address)).toBe(reason);
  });

  it.each([
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['::FFFF:A01:203', 'private network'],
    ['::ffff:169.254.169.254', 'link-local'],
    ['::ffff:0:0', 'unspecified'],
    ['::127.0.0.1', 'loopback'],
    ['::7f00:1', 'loopback'],
    ['::a9fe:a9fe', 'link-local'],
    ['64:ff9b::10.0.0.1', 'private network'],
    ['64:ff9b::7f00:1', 'loopback'],
    ['64:ff9b::c0a8:101', 'private network'],
  ])('judges IPv6 %s by its embedded IPv4 (%s)', (address, reason) => {
    expect(forbiddenAddressReason(address)).toBe(reason);
  });

  it.each([
    '8.8.8.8',
    '1.1.1.1',
    '9.255.255.255',
    '11.0.0.0',
    '100.63.255.255',
    '100.128.0.0',
    '126.255.255.255',
    '128.0.0.1',
    '169.253.255.255',
    '172.15.255.255',
    '172.32.0.0',
    '192.0.1.1',
    '192.167.255.255',
    '192.169.0.0',
    '198.17.255.255',
    '198.20.0.0',
    '223.255.255.255',
    '2606:4700:4700::1111',
    '2001:4860:4860::8888',
    '2a00:1450:4001:80b::200e',
    '::ffff:8.8.8.8',
    '::ffff:808:808',
    '64:ff9b::1.1.1.1',
    '2001:db9::1',
  ])('allows the public address %s', (address) => {
    expect(forbiddenAddressReason(address)).toBeUndefined();
  });

  it.each(['localhost', 'example.com', '', '127.1', '256.0.0.1'])('fails closed on %j, which is not an address', (text) => {
    expect(forbiddenAddressReason(text)).toBe('not an IP address');
  });
});

// Other spellings of an address (RFC 3986 leaves them to the resolver; the WHATWG URL parser,
// which undici uses, reads them as IPv4): the guard must judge the address they stand for.
describe('other spellings of an address in an endpoint URL', () => {
  it.each([
    ['http://2130706433/', 'loopback'],
    ['http://0x7f000001/', 'loopback'],
    ['http://0177.0.0.1/', 'loopback'],
    ['http://0x7f.0.0.1/', 'loopback'],
    ['http://127.1/', 'loopback'],
    ['http://127.0.0.1./', 'loopback'],
    ['http://%31%32%37.0.0.1/', 'loopback'],
    ['http://012.0.0.1/', 'private network'],
    ['http://167772161/', 'private network'],
    ['http://0xA9.0xFE.0xA9.0xFE/', 'link-local'],
    ['http://2852039166/', 'link-local'],
    ['http://0251.0376.0251.0376/', 'link-local'],
    ['http://[0:0:0:0:0:ffff:169.254.169.254]/', 'link-local'],
    ['http://[::ffff:a00:1]/', 'private network'],
  ])('reads %s as the address it stands for (%s)', (url, reason) => {
    // No connection here: the delivery agent gets the host exactly as the URL parser gives it.
    expect(forbiddenAddressReason(new URL(url).hostname.replace(/^\[(.*)\]$/, '$1'))).toBe(reason);
  });
});

describe('ForbiddenAddressError', () => {
  it('names the address, the reason and the way out', () => {
    const error = new ForbiddenAddressError('10.1.2.3', 'private network');
    expect(error).toMatchObject({ name: 'ForbiddenAddressError', address: '10.1.2.3', reason: 'private network' });
    expect(error.message).toBe('refused to connect to 10.1.2.3 (private network); set WEBHOOK_ALLOW_PRIVATE_NETWORKS=true only for development');
  });
});

describe('the delivery agent against a loopback receiver', () => {
  const timeouts = { connectTimeoutMs: 2_000, responseTimeoutMs: 2_000, maxConnectionsPerOrigin: 64 };
  const guarded = createDeliveryAgent({ allowPrivateNetworks: false, ...timeouts });
  const unguarded = createDeliveryAgent({ allowPrivateNetworks: true, ...timeouts });
  const received: { url: string | undefined; httpVersion: string }[] = [];
  // The literal and lookup checks refuse before a TCP connection is opened.
  let connections = 0;
  const receiver = createReceiver();
  let port: number;

  function createReceiver(): Server {
    const server = createServer((req, res) => {
      received.push({ url: req.url, httpVersion: req.httpVersion });
      req.resume();
      res.end('ok');
    });
    return server.on('connection', () => connections++);
  }

  beforeAll(async () => {
    port = await listen(receiver, '127.0.0.1');
  });
  beforeEach(() => {
    received.length = 0;
    connections = 0;
  });
  afterAll(async () => {
    await Promise.all([guarded.close(), unguarded.close()]);
    await close(receiver);
  });

  it('refuses an IPv4 literal before connecting', async () => {
    const refused = await refusal(`http://127.0.0.1:${port}/`);
    expect(refused).toMatchObject({ address: '127.0.0.1', reason: 'loopback' });
    expect({ received, connections }).toEqual({ received: [], connections: 0 });
  });

  it('refuses a name that resolves to loopback', async () => {
    const refused = await refusal(`http://localhost:${port}/`);
    expect(refused.reason).toBe('loopback');
    expect({ received, connections }).toEqual({ received: [], connections: 0 });
  });

  // Loopback only: were the guard to let one through, the connection would stay on this machine.
  it.each(['2130706433', '0x7f000001', '0177.0.0.1', '127.1', '127.0.0.1.', '[::ffff:127.0.0.1]'])(
    'refuses the loopback spelt %s before connecting',
    async (host) => {
      const refused = await refusal(`http://${host}:${port}/`);
      expect(refused.reason).toBe('loopback');
      expect({ received, connections }).toEqual({ received: [], connections: 0 });
    },
  );

  it('refuses the IPv6 loopback literal', async (context) => {
    const ipv6Receiver = createReceiver();
    const ipv6Port = await listen(ipv6Receiver, '::1').catch(() => undefined);
    if (ipv6Port === undefined) return context.skip('::1 cannot be bound on this machine');
    try {
      const refused = await refusal(`http://[::1]:${ipv6Port}/`);
      expect(refused).toMatchObject({ address: '::1', reason: 'loopback' });
      expect({ received, connections }).toEqual({ received: [], connections: 0 });
    } finally {
      await close(ipv6Receiver);
    }
  });

  it('delivers over HTTP/1.1 when private networks are allowed', async () => {
    const response = await request(`http://127.0.0.1:${port}/hook`, { method: 'POST', body: '{}', dispatcher: unguarded });
    expect(response.statusCode).toBe(200);
    expect(await response.body.text()).toBe('ok');
    expect(received).toEqual([{ url: '/hook', httpVersion: '1.1' }]);
  });

  /** The ForbiddenAddressError somewhere in the cause chain of the failed request. */
  async function refusal(url: string): Promise<ForbiddenAddressError> {
    const error: unknown = await request(url, { method: 'POST', body: '{}', dispatcher: guarded }).then(
      () => expect.fail(`${url} was delivered`),
      (error: unknown) => error,
    );
    for (let cause = error; cause instanceof Error; cause = cause.cause) {
      if (cause instanceof ForbiddenAddressError) return cause;
    }
    throw new Error(`expected a ForbiddenAddressError, got ${String(error)}`, { cause: error });
  }
});

async function listen(server: Server, host: string): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, resolve);
  });
  return (server.address() as AddressInfo).port;
}

async function close(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve())));
}
