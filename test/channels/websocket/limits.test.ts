import { describe, expect, it } from 'vitest';
import { admissionRefusal, bindTimeoutRefusal, idleCheckIntervalMs, idleVerdict, keyLimitRefusal } from '../../../src/channels/websocket/limits.ts';

/**
 * The decisions of the websocket limits (src/channels/websocket/limits.ts),
 * from counts and clocks: whom the server takes, whom it closes, whom it pings.
 */

const limits = { maxConnections: 3, maxUnboundPerAddress: 2, maxConnectionsPerKey: 2, bindTimeoutMs: 5_000, idleTimeoutMs: 10_000 };

describe('admissionRefusal', () => {
  const counted = (connections: number, unbound: number) => ({ closing: false, connections, unboundFromAddress: () => unbound });

  it('takes a connection within WEBSOCKET_MAX_CONNECTIONS and WEBSOCKET_MAX_UNBOUND_PER_ADDRESS, both counting it', () => {
    expect(admissionRefusal(limits, counted(3, 2))).toBeUndefined();
  });

  it('refuses one while the service stops (1001)', () => {
    expect(admissionRefusal(limits, { ...counted(1, 1), closing: true })).toEqual({ reason: 'shutdown', code: 1001, text: 'The service is stopping' });
  });

  it('refuses one past the connections of the process (1013), without counting its address', () => {
    let countedAddress = false;
    const refusal = admissionRefusal(limits, {
      closing: false,
      connections: 4,
      unboundFromAddress: () => {
        countedAddress = true;
        return 1;
      },
    });
    expect(refusal).toEqual({
      reason: 'server-full',
      code: 1013,
      text: 'This server holds 3 websocket clients, the most WEBSOCKET_MAX_CONNECTIONS allows: try again later',
    });
    expect(countedAddress).toBe(false);
  });

  it("refuses one past its address's unbound connections (1013)", () => {
    expect(admissionRefusal(limits, counted(3, 3))).toEqual({
      reason: 'server-full',
      code: 1013,
      text: 'This address has 2 websocket connections with nothing bound, the most WEBSOCKET_MAX_UNBOUND_PER_ADDRESS allows: bind them first',
    });
  });
});

describe('keyLimitRefusal', () => {
  it('binds while the key has bound fewer other connections than WEBSOCKET_MAX_CONNECTIONS_PER_KEY', () => {
    expect(keyLimitRefusal(limits, 0)).toBeUndefined();
    expect(keyLimitRefusal(limits, 1)).toBeUndefined();
  });

  it('refuses a bind once it has bound as many (1008, a security issue)', () => {
    expect(keyLimitRefusal(limits, 2)).toEqual({
      reason: 'key-limit',
      code: 1008,
      text: 'This API key has 2 websocket clients bound, the most WEBSOCKET_MAX_CONNECTIONS_PER_KEY allows',
    });
  });
});

describe('bindTimeoutRefusal', () => {
  it('closes normally (1000), saying the deadline in seconds', () => {
    expect(bindTimeoutRefusal(limits)).toEqual({
      reason: 'idle',
      code: 1000,
      text: 'Nothing bound within 5 s of connecting: send bind-with-token <token> at once',
    });
  });
});

describe('idleVerdict', () => {
  const now = 1_000_000;

  it('leaves an unbound client alone for the idle timeout, then closes it normally (1000)', () => {
    expect(idleVerdict(limits, { idleSince: now - 9_999, lastPongAt: 0 }, now)).toBeUndefined();
    expect(idleVerdict(limits, { idleSince: now - 10_000, lastPongAt: now }, now)).toEqual({
      close: { reason: 'idle', code: 1000, text: 'Nothing bound for 10 s: send bind-with-token <token> after connecting' },
    });
  });

  it('pings a bound client that answers, and cuts off one silent for the idle timeout', () => {
    expect(idleVerdict(limits, { idleSince: undefined, lastPongAt: now - 9_999 }, now)).toEqual({ ping: true });
    expect(idleVerdict(limits, { idleSince: undefined, lastPongAt: now - 10_000 }, now)).toEqual({ terminate: true });
  });

  it('checks four times per idle timeout, no more often than every 250 ms', () => {
    expect(idleCheckIntervalMs({ idleTimeoutMs: 10_000 })).toBe(2_500);
    expect(idleCheckIntervalMs({ idleTimeoutMs: 2_000 })).toBe(500);
    expect(idleCheckIntervalMs({ idleTimeoutMs: 400 })).toBe(250);
  });
});
