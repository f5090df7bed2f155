import { lookup } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { Agent, buildConnector } from 'undici';

/**
 * The SSRF guard for webhook deliveries. Subscribers choose the endpoint URL, so
 * without it anyone allowed to create a subscription could make the service call
 * its own database, the cloud metadata endpoint or anything else on the inside.
 */

type Range = readonly [network: string, prefix: number, reason: string];

const ipv4Ranges: readonly Range[] = [
  ['0.0.0.0', 8, 'unspecified'],
  ['10.0.0.0', 8, 'private network'],
  ['100.64.0.0', 10, 'carrier-grade NAT'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local'],
  ['172.16.0.0', 12, 'private network'],
  ['192.0.0.0', 24, 'reserved'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.168.0.0', 16, 'private network'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved'],
];

const ipv6Ranges: readonly Range[] = [
  ['::', 128, 'unspecified'],
  ['::1', 128, 'loopback'],
  ['fc00::', 7, 'private network'],
  ['fe80::', 10, 'link-local'],
  ['ff00::', 8, 'multicast'],
  ['2001:db8::', 32, 'documentation'],
  ['100::', 64, 'discard-only'],
];

/** IPv6 forms that carry an IPv4 address, which is where such a packet ends up. */
const ipv4Carriers = rangeMatcher('ipv6', [
  ['::ffff:0:0', 96, 'IPv4-mapped'],
  ['::', 96, 'IPv4-compatible'],
  ['64:ff9b::', 96, 'NAT64'],
]);

// All global unicast IPv6 is allocated from 2000::/3; the rest of the space is reserved.
const globalUnicastIpv6 = rangeMatcher('ipv6', [['2000::', 3, 'global unicast']]);

const ipv4Reason = rangeMatcher('ipv4', ipv4Ranges);
const ipv6Reason = rangeMatcher('ipv6', ipv6Ranges);

/** Why the address must not be contacted, or undefined for a public unicast address. */
export function forbiddenAddressReason(address: string): string | undefined {
  switch (isIP(address)) {
    case 4:
      return ipv4Reason(address);
    case 6:
      return forbiddenIpv6Reason(address.replace(/%.*$/, ''));
    default:
      // Anything that is not an address (an unconnected socket has none) fails closed.
      return 'not an IP address';
  }
}

function forbiddenIpv6Reason(address: string): string | undefined {
  const reason = ipv6Reason(address);
  if (reason !== undefined) return reason;
  if (ipv4Carriers(address) !== undefined) return forbiddenAddressReason(embeddedIpv4(address));
  return globalUnicastIpv6(address) === undefined ? 'reserved' : undefined;
}

/** BlockList says whether an address is in a list, not which entry matched: one list per range. */
function rangeMatcher(family: 'ipv4' | 'ipv6', ranges: readonly Range[]): (address: string) => string | undefined {
  const lists = ranges.map(([network, prefix, reason]) => {
    const list = new BlockList();
    list.addSubnet(network, prefix, family);
    return { list, reason };
  });
  return (address) => lists.find(({ list }) => list.check(address, family))?.reason;
}

/** The last 32 bits of a valid IPv6 address, written either in hex (::ffff:7f00:1) or dotted (::ffff:127.0.0.1). */
function embeddedIpv4(address: string): string {
  const dotted = /\d+\.\d+\.\d+\.\d+$/.exec(address);
  if (dotted) return dotted[0];
  const [head = '', tail] = address.split('::');
  const groups = (text: string) => (text === '' ? [] : text.split(':').map((group) => parseInt(group, 16)));
  const left = groups(head);
  const right = tail === undefined ? [] : groups(tail);
  const all = [...left, ...Array<number>(8 - left.length - right.length).fill(0), ...right];
  const [high = 0, low = 0] = all.slice(6);
  return [high >> 8, high & 0xff, low >> 8, low & 0xff].join('.');
}

export class ForbiddenAddressError extends Error {
  override name = 'ForbiddenAddressError';
  readonly address: string;
  readonly reason: string;

  constructor(address: string, reason: string) {
    super(`refused to connect to ${address} (${reason}); set WEBHOOK_ALLOW_PRIVATE_NETWORKS=true only for development`);
    this.address = address;
    this.reason = reason;
  }
}

function refusal(address: string): ForbiddenAddressError | undefined {
  const reason = forbiddenAddressReason(address);
  return reason === undefined ? undefined : new ForbiddenAddressError(address, reason);
}

/**
 * Resolves every address of the name and refuses the name when any of them is
 * forbidden, rather than connecting to the allowed ones: a public endpoint has no
 * business publishing a private address, so a mixed answer is a misconfiguration or
 * a rebinding attempt, and refusing it gives the same clear error on every attempt
 * instead of a delivery that works or fails depending on which address is tried.
 */
const guardedLookup: LookupFunction = (hostname, options, callback) => {
  lookup(hostname, { ...options, all: true }, (error, addresses) => {
    if (error) return callback(error, '');
    const refused = addresses.map(({ address }) => refusal(address)).find((each) => each !== undefined);
    if (refused) return callback(refused, '');
    // net asks for all addresses when it races the families (autoSelectFamily, on by default).
    if (options.all) return callback(null, addresses);
    // dns.lookup reports ENOTFOUND rather than an empty list.
    const [first] = addresses;
    callback(null, first?.address ?? '', first?.family);
  });
};

/**
 * Node skips `lookup` for an IP-literal host, so the literal is checked before
 * connecting; the socket's remote address is checked once connected, as a backstop
 * for any path that reaches an address neither check saw.
 */
function guardedConnector(connectorOptions: buildConnector.BuildOptions): buildConnector.connector {
  const connect = buildConnector({ ...connectorOptions, lookup: guardedLookup });
  return (options, callback) => {
    const literal = isIP(options.hostname) === 0 ? undefined : refusal(options.hostname);
    if (literal) return callback(literal, null);
    connect(options, (error, socket) => {
      if (error) return callback(error, null);
      const refused = refusal(socket.remoteAddress ?? '');
      if (!refused) return callback(null, socket);
      socket.destroy(refused);
      callback(refused, null);
    });
  };
}

export type DeliveryAgentOptions = {
  /** Turns the guard off, for development against local receivers. */
  allowPrivateNetworks: boolean;
  connectTimeoutMs: number;
  /** Limit on the wait for the response headers, and between body chunks. */
  responseTimeoutMs: number;
  /**
   * Connections to one origin (scheme, host and port) at most, idle ones included; a call past
   * them waits in the origin's queue for one to free up (DELIVERY_MAX_CONNECTIONS_PER_ORIGIN).
   */
  maxConnectionsPerOrigin: number;
};

/**
 * The dispatcher for webhook deliveries: HTTP/1.1 only, with the SSRF guard unless turned off,
 * and a pool of at most `maxConnectionsPerOrigin` connections for each origin. A connection
 * carries one call at a time (undici's default pipelining of 1), so the cap is also the calls
 * in flight to the origin.
 */
export function createDeliveryAgent(options: DeliveryAgentOptions): Agent {
  // A connector function does not see the Agent's connectTimeout, and offers h2 in
  // ALPN unless built with allowH2: false, so both settings go to the connector too.
  const connectorOptions = { allowH2: false, timeout: options.connectTimeoutMs };
  return new Agent({
    allowH2: false,
    connections: options.maxConnectionsPerOrigin,
    headersTimeout: options.responseTimeoutMs,
    bodyTimeout: options.responseTimeoutMs,
    connect: options.allowPrivateNetworks ? connectorOptions : guardedConnector(connectorOptions),
  });
}
