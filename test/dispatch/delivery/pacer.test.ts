import { describe, expect, it } from 'vitest';
import { Pacer } from '../../../src/dispatch/events/delivery/pacer.ts';

/**
 * A throttled subscription's calls spaced 1/rate apart (src/dispatch/events/delivery/pacer.ts),
 * from where the sender before left off, across the lanes that take turns.
 */

describe('Pacer', () => {
  it('spaces the slots 1/rate apart, each reserved at once', () => {
    const pacer = new Pacer(10, null, 1_000);
    expect([pacer.reserve(1_000), pacer.reserve(1_000), pacer.reserve(1_000)]).toEqual([0, 100, 200]);
    expect(pacer.nextCallAt).toEqual(new Date(1_300));
    // A slot reserved later waits less for the same place.
    expect(pacer.reserve(1_250)).toBe(50);
  });

  it('goes on from where the sender before left off', () => {
    const resumed = new Pacer(4, new Date(1_500), 1_000);
    expect([resumed.reserve(1_000), resumed.reserve(1_000)]).toEqual([500, 750]);
    // Left off long ago: the first call goes at once.
    const stale = new Pacer(4, new Date(0), 1_000);
    expect(stale.reserve(1_000)).toBe(0);
    expect(stale.nextCallAt).toEqual(new Date(1_250));
  });

  it('gives a subscription idle for a while its next call at once, then the spacing again', () => {
    const pacer = new Pacer(2, null, 0);
    expect(pacer.reserve(0)).toBe(0);
    expect(pacer.reserve(10_000)).toBe(0);
    expect(pacer.reserve(10_000)).toBe(500);
    expect(pacer.nextCallAt).toEqual(new Date(11_000));
  });

  it('paces a rate below one a second, and one that does not divide a second', () => {
    expect([0, 0, 0].map((now) => new Pacer(0.5, null, 0).reserve(now))).toEqual([0, 0, 0]);
    const slow = new Pacer(0.5, null, 0);
    expect([slow.reserve(0), slow.reserve(0)]).toEqual([0, 2_000]);
    const third = new Pacer(3, null, 0);
    expect([third.reserve(0), third.reserve(0), third.reserve(0), third.reserve(0)].map(Math.round)).toEqual([0, 333, 667, 1_000]);
  });

  it('waits for a slot, and says when a shutdown cut the wait short', async () => {
    const pacer = new Pacer(0.001, null);
    expect(await pacer.slot()).toBe(true);
    // The next slot is 1,000 s away: an aborted signal ends the wait at once.
    expect(await pacer.slot(AbortSignal.abort())).toBe(false);
    expect(await new Pacer(1_000, null).slot(AbortSignal.abort())).toBe(true);
  });
});
