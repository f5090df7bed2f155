import { describe, expect, it } from 'vitest';
import { emptyVerdict, FailingSubscribers, startsWithProbe, type Verdict } from '../../../src/dispatch/events/delivery/judge.ts';
import { claimedEvent, callResult } from './claimed-events.ts';

/**
 * Which subscribers get a probe first (src/dispatch/events/delivery/judge.ts):
 * those whose last calls from this sender were to be retried, until one is
 * delivered, and any batch that holds a retry.
 */

const verdict = (changes: Partial<Verdict>): Verdict => ({ ...emptyVerdict(), ...changes });
const failure = { event: claimedEvent(1), result: callResult('retryable') };

describe('FailingSubscribers', () => {
  it('holds a subscriber from a retryable failure until a delivery', () => {
    const failing = new FailingSubscribers();
    failing.record('a', verdict({ retried: 2 }));
    failing.record('b', verdict({ exhausted: failure }));
    expect([failing.has('a'), failing.has('b'), failing.has('c')]).toEqual([true, true, false]);
    // A batch of gone versions, or of refusals only, says nothing of whether the subscriber answers.
    failing.record('a', verdict({}));
    failing.record('a', verdict({ lastRefusal: { event: claimedEvent(2), result: callResult('permanent') }, trailingRefusals: 1 }));
    expect(failing.has('a')).toBe(true);
    failing.record('a', verdict({ delivered: true }));
    expect(failing.has('a')).toBe(false);
    // A delivery beside a retry: still failing.
    failing.record('b', verdict({ delivered: true, retried: 1 }));
    expect(failing.has('b')).toBe(true);
  });

  it('forgets the oldest past 10,000 subscribers', () => {
    const failing = new FailingSubscribers();
    for (let n = 0; n <= 10_000; n++) failing.record(`s${n}`, verdict({ retried: 1 }));
    expect(failing.has('s0')).toBe(false);
    expect(failing.has('s1')).toBe(true);
    expect(failing.has('s10000')).toBe(true);
  });
});

describe('startsWithProbe', () => {
  it('probes a failing subscriber, and a batch holding a retry', () => {
    const failing = new FailingSubscribers();
    failing.record('down', verdict({ retried: 1 }));
    expect(startsWithProbe(failing, 'down', [claimedEvent(1)])).toBe(true);
    expect(startsWithProbe(failing, 'up', [claimedEvent(1)])).toBe(false);
    expect(startsWithProbe(failing, 'up', [claimedEvent(1), claimedEvent(2, { attempts: 1 })])).toBe(true);
    expect(startsWithProbe(undefined, 'up', [claimedEvent(1)])).toBe(false);
    expect(startsWithProbe(undefined, 'up', [claimedEvent(1, { attempts: 3 })])).toBe(true);
  });
});
