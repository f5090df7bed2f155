import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { judge, withoutFailures, type JudgeContext } from '../../../src/dispatch/events/delivery/judge.ts';
import type { Sent } from '../../../src/dispatch/events/delivery/send.ts';
import type { ClaimedEvent } from '../../../src/db/sql/claim-subscription-events.ts';
import { callResult, claimedEvent, claimedEvents } from './claimed-events.ts';

/**
 * The verdict on a batch's answers (src/dispatch/events/delivery/judge.ts): what
 * becomes of each event, the attempt rows, and what the settle stage acts on,
 * before anything is written. The clock is fixed, and the jitter drawn in the
 * middle (the configured delay itself).
 */

const now = new Date('2026-11-27T12:00:00Z');
const target = { id: '00000000-0000-4000-8000-000000000001', retry: { maxFailures: 3, retryDelaysMs: [1_000, 5_000] } };
const later = (ms: number) => new Date(now.getTime() + ms);

const warn = vi.fn<(...args: unknown[]) => void>();
const context: JudgeContext = { logger: { warn } };
beforeEach(() => {
  vi.useFakeTimers({ toFake: ['Date'], now });
  vi.spyOn(Math, 'random').mockReturnValue(0.5);
  warn.mockClear();
});
afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

/** A notification per run of events, in order. */
const notifications = (...runs: ClaimedEvent[][]) => runs.map((events) => ({ events }));

describe('judge', () => {
  it('delivers every event a delivered call carried: one attempt row per event, one call', () => {
    const sent = notifications(claimedEvents(1, 3), [claimedEvent(4, { attempts: 1 })]);
    const verdict = judge(context, target, sent, [callResult('delivered'), callResult('delivered')]);
    expect(verdict.outcomes).toEqual([
      { eventId: '1001', status: 'delivered', attempts: 1, notBefore: null },
      { eventId: '1002', status: 'delivered', attempts: 1, notBefore: null },
      { eventId: '1003', status: 'delivered', attempts: 1, notBefore: null },
      { eventId: '1004', status: 'delivered', attempts: 2, notBefore: null },
    ]);
    expect(verdict.records.map((row) => [row.event_number, row.attempt, row.outcome, row.kind, row.http_status])).toEqual([
      [1, 1, 'delivered', 'notification', 200],
      [2, 1, 'delivered', 'notification', 200],
      [3, 1, 'delivered', 'notification', 200],
      [4, 2, 'delivered', 'notification', 200],
    ]);
    expect(verdict.calls.map((row) => row.event_number)).toEqual([1, 4]);
    expect(verdict).toMatchObject({ retried: 0, exhausted: undefined, lastRefusal: undefined, trailingRefusals: 0, delivered: true });
    expect(withoutFailures(verdict)).toBe(true);
  });

  it('retries a retryable failure after the delay of its attempt, and the events not sent after it as long', () => {
    const failed = callResult('retryable');
    const sent = notifications([claimedEvent(1)], claimedEvents(2, 3), [claimedEvent(4)]);
    const verdict = judge(context, target, sent, [callResult('delivered'), failed, 'unsent']);
    expect(verdict.outcomes).toEqual([
      { eventId: '1001', status: 'delivered', attempts: 1, notBefore: null },
      { eventId: '1002', status: 'pending', attempts: 1, notBefore: later(1_000) },
      { eventId: '1003', status: 'pending', attempts: 1, notBefore: later(1_000) },
      { eventId: '1004', status: 'pending', attempts: 0, notBefore: later(1_000) },
    ]);
    expect(verdict.records.map((row) => [row.event_number, row.outcome])).toEqual([
      [1, 'delivered'],
      [2, 'retrying'],
      [3, 'retrying'],
    ]);
    expect(verdict.retried).toBe(3);
    expect(verdict.delivered).toBe(true);
    expect(withoutFailures(verdict)).toBe(false);
  });

  it("gives a notification one delay, its most tried event's, and honours a Retry-After", () => {
    const mixed = judge(context, target, notifications([claimedEvent(1), claimedEvent(2, { attempts: 1 })]), [callResult('retryable')]);
    expect(mixed.outcomes.map((outcome) => [outcome.attempts, outcome.notBefore])).toEqual([
      [1, later(5_000)],
      [2, later(5_000)],
    ]);
    const asked = judge(context, target, notifications([claimedEvent(1)]), [callResult('retryable', { retryAfterSeconds: 30 })]);
    expect(asked.outcomes[0]!.notBefore).toEqual(later(30_000));
  });

  it("follows the subscription's own retry policy: its attempts and its backoff", () => {
    const once = { ...target, retry: { ...target.retry, maxFailures: 1 } };
    expect(judge(context, once, notifications([claimedEvent(1)]), [callResult('retryable')]).exhausted?.event.eventNumber).toBe(1);
    const backoff = { ...target, retry: { ...target.retry, maxFailures: 5, backoff: { firstDelayMs: 2_000, growth: 3, maxDelayMs: 10_000 } } };
    const notBefore = (attempts: number) =>
      judge(context, backoff, notifications([claimedEvent(1, { attempts })]), [callResult('retryable')]).outcomes[0]!.notBefore;
    expect([0, 1, 2].map(notBefore)).toEqual([later(2_000), later(6_000), later(10_000)]);
  });

  it('fails the events of a last attempt that failed: the first of them exhausts the subscription', () => {
    const verdict = judge(context, target, notifications([claimedEvent(1, { attempts: 2 })], [claimedEvent(2, { attempts: 2 })]), [
      callResult('retryable'),
      callResult('retryable'),
    ]);
    expect(verdict.outcomes.map((outcome) => [outcome.status, outcome.attempts, outcome.notBefore])).toEqual([
      ['failed', 3, null],
      ['failed', 3, null],
    ]);
    expect(verdict.records.map((row) => row.outcome)).toEqual(['failed', 'failed']);
    expect(verdict.exhausted?.event.eventNumber).toBe(1);
    expect(verdict.retried).toBe(0);
    expect(withoutFailures(verdict)).toBe(false);
  });

  it('ends a refused notification at once, counting the refusals after the last delivery', () => {
    const verdict = judge(context, target, notifications([claimedEvent(1)], [claimedEvent(2)], [claimedEvent(3)], [claimedEvent(4)]), [
      callResult('permanent'),
      callResult('delivered'),
      callResult('permanent'),
      callResult('permanent'),
    ]);
    expect(verdict.outcomes.map((outcome) => outcome.status)).toEqual(['failed', 'delivered', 'failed', 'failed']);
    expect(verdict.lastRefusal?.event.eventNumber).toBe(4);
    expect(verdict.trailingRefusals).toBe(2);
    expect(verdict).toMatchObject({ retried: 0, exhausted: undefined, delivered: true });
    expect(withoutFailures(verdict)).toBe(false);
    // A delivery after the refusals ends their run.
    const refusedThenDelivered = judge(context, target, notifications([claimedEvent(1)], [claimedEvent(2)]), [
      callResult('permanent'),
      callResult('delivered'),
    ]);
    expect(refusedThenDelivered.trailingRefusals).toBe(0);
  });

  it('settles a notification whose version is gone without a call, and says so', () => {
    const verdict = judge(context, target, notifications([claimedEvent(1, { attempts: 1 })]), ['gone']);
    expect(verdict.outcomes).toEqual([{ eventId: '1001', status: 'gone', attempts: 1, notBefore: null }]);
    expect(verdict.records).toEqual([]);
    expect(withoutFailures(verdict)).toBe(true);
    expect(warn).toHaveBeenCalledWith({ subscriptionId: target.id, event: 'Patient/1/_history/1' }, expect.stringContaining('gone'));
  });

  it('leaves the events not sent by a shutdown due at once, their attempts unchanged', () => {
    const results: Sent[] = [callResult('delivered'), 'unsent'];
    const verdict = judge(context, target, notifications([claimedEvent(1)], [claimedEvent(2, { attempts: 1 })]), results);
    expect(verdict.outcomes[1]).toEqual({ eventId: '1002', status: 'pending', attempts: 1, notBefore: null });
    expect(verdict.retried).toBe(0);
    expect(withoutFailures(verdict)).toBe(true);
  });
});
