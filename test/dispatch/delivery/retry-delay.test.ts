import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { retryDelay } from '../../../src/dispatch/events/retry-delay.ts';

/**
 * The delay before each retry (src/dispatch/events/retry-delay.ts): DELIVERY_RETRY_DELAYS_MS
 * jittered, a Retry-After within its cap, none after the last attempt.
 */

const seed = Number(process.env.UNIT_PROPERTY_SEED ?? '20261127');
const schedule = { maxFailures: 5, retryDelaysMs: [1_000, 10_000, 60_000] };
/** A draw of the jitter in the middle: the configured delay itself. */
const middle = () => 0.5;

describe('retryDelay', () => {
  it('spaces the attempts by the configured delays, the last one repeating', () => {
    expect([1, 2, 3, 4].map((attempt) => retryDelay(schedule, attempt, undefined, middle))).toEqual([1_000, 10_000, 60_000, 60_000]);
  });

  it('gives none after the last of DELIVERY_MAX_FAILURES attempts', () => {
    expect(retryDelay(schedule, 5, undefined, middle)).toBeUndefined();
    expect(retryDelay(schedule, 6, undefined, middle)).toBeUndefined();
    expect(retryDelay({ maxFailures: 1, retryDelaysMs: [1_000] }, 1, 30, middle)).toBeUndefined();
  });

  it("follows a subscription's backoff in place of the list: multiplied at each retry, up to its longest delay", () => {
    const backoff = { ...schedule, maxFailures: 7, backoff: { firstDelayMs: 500, growth: 3, maxDelayMs: 20_000 } };
    expect([1, 2, 3, 4, 5, 6].map((attempt) => retryDelay(backoff, attempt, undefined, middle))).toEqual([500, 1_500, 4_500, 13_500, 20_000, 20_000]);
    expect(retryDelay(backoff, 7, undefined, middle)).toBeUndefined();
    expect(retryDelay({ ...backoff, backoff: { firstDelayMs: 2_000, growth: 1, maxDelayMs: 2_000 } }, 3, undefined, middle)).toBe(2_000);
  });

  it('jitters each delay by ±20%', () => {
    expect(retryDelay(schedule, 2, undefined, () => 0)).toBe(8_000);
    expect(retryDelay(schedule, 2, undefined, () => 0.25)).toBe(9_000);
    expect(retryDelay(schedule, 2, undefined, () => 0.999_999)).toBe(12_000);
  });

  it('waits for a Retry-After longer than the delay, up to 600 s', () => {
    expect(retryDelay(schedule, 1, 30, middle)).toBe(30_000);
    expect(retryDelay(schedule, 1, 0, middle)).toBe(1_000);
    expect(retryDelay(schedule, 1, 3_600, middle)).toBe(600_000);
    // The cap bounds what a subscriber asks for, not the configured delay.
    expect(retryDelay({ maxFailures: 5, retryDelaysMs: [900_000] }, 1, 3_600, middle)).toBe(900_000);
  });

  it('stays within ±20% of the configured delay, or the Retry-After, whatever the draw', () => {
    const drawn = fc.record({
      delays: fc.array(fc.integer({ min: 1, max: 3_600_000 }), { minLength: 1, maxLength: 6 }),
      maxFailures: fc.integer({ min: 2, max: 12 }),
      draw: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
      retryAfter: fc.option(fc.integer({ min: 0, max: 100_000 }), { nil: undefined }),
    });
    fc.assert(
      fc.property(drawn, fc.integer({ min: 1, max: 12 }), ({ delays, maxFailures, draw, retryAfter }, attempt) => {
        const delay = retryDelay({ maxFailures, retryDelaysMs: delays }, attempt, retryAfter, () => draw);
        if (attempt >= maxFailures) return delay === undefined;
        const configured = delays[Math.min(attempt, delays.length) - 1]!;
        const floor = Math.max(Math.round(configured * 0.8), Math.min(retryAfter ?? 0, 600) * 1000);
        return delay !== undefined && delay >= floor && delay <= Math.max(Math.round(configured * 1.2), Math.min(retryAfter ?? 0, 600) * 1000);
      }),
      { seed, numRuns: 500 },
    );
  });
});
