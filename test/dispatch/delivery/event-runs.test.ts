import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { topicRuns } from '../../../src/dispatch/events/delivery/build.ts';
import type { ClaimedEvent } from '../../../src/db/sql/claim-subscription-events.ts';
import { eventKey } from '../../../src/db/jobs.ts';
import { claimedEvent, claimedEvents } from './claimed-events.ts';

/**
 * A topic-based subscription's events as notifications of up to max-count
 * (src/dispatch/events/delivery/build.ts, topicRuns): runs of consecutive
 * numbers with the same count of attempts, a gone version alone.
 */

const seed = Number(process.env.UNIT_PROPERTY_SEED ?? '20261127');

/** The versions present: every event's but those numbered in `gone`. */
const present = (events: ClaimedEvent[], gone: number[] = []) => new Set(events.filter((event) => !gone.includes(event.eventNumber)).map(eventKey));
const numbers = (runs: ClaimedEvent[][]) => runs.map((run) => run.map((event) => event.eventNumber));

describe('topicRuns', () => {
  it('groups consecutive events up to max-count', () => {
    const events = claimedEvents(1, 7);
    expect(numbers(topicRuns(events, present(events), 3))).toEqual([[1, 2, 3], [4, 5, 6], [7]]);
    expect(numbers(topicRuns(events, present(events), 1))).toEqual([[1], [2], [3], [4], [5], [6], [7]]);
    expect(numbers(topicRuns(events, present(events), 100))).toEqual([[1, 2, 3, 4, 5, 6, 7]]);
  });

  it('starts a notification after a gap in the numbers, and at a different count of attempts', () => {
    const events = [...claimedEvents(1, 2), ...claimedEvents(5, 6), ...claimedEvents(7, 8, { attempts: 1 }), claimedEvent(9)];
    expect(numbers(topicRuns(events, present(events), 10))).toEqual([[1, 2], [5, 6], [7, 8], [9]]);
  });

  it('sends a resent event, numbered lower, in a notification of its own', () => {
    const events = [claimedEvent(3), ...claimedEvents(10, 11)];
    expect(numbers(topicRuns(events, present(events), 10))).toEqual([[3], [10, 11]]);
  });

  it('leaves an event whose version is gone alone, and starts afresh after it', () => {
    const events = claimedEvents(1, 5);
    expect(numbers(topicRuns(events, present(events, [3]), 10))).toEqual([[1, 2], [3], [4, 5]]);
    expect(numbers(topicRuns(events, present(events, [1, 2]), 10))).toEqual([[1], [2], [3, 4, 5]]);
  });

  it('keeps every event once, in order, in the largest runs the rules allow', () => {
    const batch = fc.record({
      // Mostly the next number, now and then a gap or a resent lower one; mostly first attempts; a version gone now and then.
      steps: fc.array(
        fc.record({
          gap: fc.constantFrom(1, 1, 1, 2, -5),
          attempts: fc.constantFrom(0, 0, 0, 1),
          gone: fc.integer({ min: 0, max: 9 }).map((draw) => draw === 0),
        }),
        { maxLength: 120 },
      ),
      maxCount: fc.integer({ min: 1, max: 12 }),
    });
    fc.assert(
      fc.property(batch, ({ steps, maxCount }) => {
        let number = 100;
        const events = steps.map(({ gap, attempts }, index) => ({ ...claimedEvent((number += gap), { attempts }), eventId: String(index) }));
        const versions = new Set(events.filter((_, index) => !steps[index]!.gone).map(eventKey));
        const runs = topicRuns(events, versions, maxCount);
        expect(runs.flat()).toEqual(events);
        for (const [index, run] of runs.entries()) {
          expect(run.length).toBeLessThanOrEqual(maxCount);
          if (run.some((event) => !versions.has(eventKey(event)))) expect(run).toHaveLength(1);
          for (const [at, event] of run.entries()) {
            if (at === 0) continue;
            expect(event.eventNumber).toBe(run[at - 1]!.eventNumber + 1);
            expect(event.attempts).toBe(run[at - 1]!.attempts);
          }
          // A run starts only where the one before could not take its first event.
          const before = runs[index - 1];
          if (before === undefined) continue;
          const last = before.at(-1)!;
          const joinable =
            versions.has(eventKey(last)) &&
            versions.has(eventKey(run[0]!)) &&
            before.length < maxCount &&
            run[0]!.eventNumber === last.eventNumber + 1 &&
            run[0]!.attempts === last.attempts;
          expect(joinable).toBe(false);
        }
      }),
      { seed, numRuns: 300 },
    );
  });
});
