import { attemptRecord, type AttemptOutcome, type DispatchContext, type Target } from '../../subscriber.ts';
import type { CallResult } from '../../../channels/channel.ts';
import { eventKey } from '../../../db/jobs.ts';
import type { AttemptRow, EventOutcome } from '../log.ts';
import type { ClaimedEvent } from '../../../db/sql/claim-subscription-events.ts';
import { retryDelay } from '../retry-delay.ts';
import type { NotificationOfEvents } from './build.ts';
import type { Sent } from './send.ts';

/**
 * The judge stage of a claim's delivery (src/dispatch/events/delivery/deliver-claim.ts):
 * what the calls' answers come to for each event, before anything is written,
 * and which subscribers are failing (their next batch starts with a probe).
 */

/** An event and the failed call that decides something about it. */
type Failure = { event: ClaimedEvent; result: CallResult };

/** What a claim's calls come to, before anything is written. */
export type Verdict = {
  outcomes: EventOutcome[];
  /** One row per event a call carried: a call of N events is N rows, with the same start, answer and outcome. */
  records: AttemptRow[];
  /** One row per call (its first event's): what the call metrics count. */
  calls: AttemptRow[];
  /** Events to try again after a failed call. */
  retried: number;
  /** The first event whose last attempt failed: it deactivates the subscription. */
  exhausted: Failure | undefined;
  /** The first event of the last notification refused for good, and how many notifications were refused after the claim's last delivery. */
  lastRefusal: Failure | undefined;
  trailingRefusals: number;
  delivered: boolean;
};

/** What judging needs of the dispatch context: a logger for the notifications gone. */
export type JudgeContext = { logger: Pick<DispatchContext['logger'], 'warn'> };

/** A verdict on nothing yet: what judge starts from. */
export function emptyVerdict(): Verdict {
  return { outcomes: [], records: [], calls: [], retried: 0, exhausted: undefined, lastRefusal: undefined, trailingRefusals: 0, delivered: false };
}

/** The verdict on a claim's calls to `target`, whose retry schedule (its own policy, or the service's) spaces and ends the retries. */
export function judge(
  context: JudgeContext,
  target: Pick<Target, 'id' | 'retry'>,
  notifications: Pick<NotificationOfEvents, 'events'>[],
  results: Sent[],
): Verdict {
  const verdict = emptyVerdict();
  // Events not sent after a retryable failure wait as long as the longest retry; after a shutdown, not at all.
  let unsentWaitMs = 0;
  const unsent: ClaimedEvent[] = [];
  for (const [index, { events }] of notifications.entries()) {
    const result = results[index]!;
    const first = events[0]!;
    const outcome = (status: EventOutcome['status'], notBefore: Date | null = null) => {
      for (const event of events) {
        verdict.outcomes.push({ eventId: event.eventId, status, attempts: status === 'gone' ? event.attempts : event.attempts + 1, notBefore });
      }
    };
    const record = (callResult: CallResult, recorded: AttemptOutcome) => {
      const rows = events.map((event) => attemptRecord(target.id, 'notification', event, event.attempts + 1, callResult, recorded));
      verdict.records.push(...rows);
      verdict.calls.push(rows[0]!);
    };
    if (result === 'gone') {
      context.logger.warn({ subscriptionId: target.id, event: eventKey(first) }, 'the resource version of a notification is gone; nothing to deliver');
      outcome('gone');
    } else if (result === 'unsent') {
      unsent.push(...events);
    } else if (result.verdict === 'delivered') {
      record(result, 'delivered');
      outcome('delivered');
      verdict.delivered = true;
      verdict.trailingRefusals = 0;
    } else if (result.verdict === 'retryable') {
      // One delay for the notification, so that its events come due together and are sent again as one;
      // jittered, so that a blip of the subscriber does not fail several notifications at once.
      const delay = retryDelay(target.retry, Math.max(...events.map((event) => event.attempts)) + 1, result.retryAfterSeconds);
      if (delay === undefined) {
        verdict.exhausted ??= { event: first, result };
        outcome('failed');
      } else {
        outcome('pending', new Date(Date.now() + delay));
        verdict.retried += events.length;
        unsentWaitMs = Math.max(unsentWaitMs, delay);
      }
      record(result, delay === undefined ? 'failed' : 'retrying');
    } else {
      // A permanent failure (a 4xx but 429, a refused address) ends the notification's events at once: one refusal.
      record(result, 'failed');
      outcome('failed');
      verdict.lastRefusal = { event: first, result };
      verdict.trailingRefusals += 1;
    }
  }
  const unsentNotBefore = () => (unsentWaitMs > 0 ? new Date(Date.now() + unsentWaitMs) : null);
  for (const event of unsent) verdict.outcomes.push({ eventId: event.eventId, status: 'pending', attempts: event.attempts, notBefore: unsentNotBefore() });
  if (unsentWaitMs > 0) verdict.retried += unsent.length;
  return verdict;
}

/** Whether every call of the verdict went well: nothing to retry, nothing exhausted or refused. */
export function withoutFailures(verdict: Verdict): boolean {
  return verdict.retried === 0 && verdict.exhausted === undefined && verdict.lastRefusal === undefined;
}

/**
 * The subscribers whose last calls from this sender failed and were to be
 * retried (a retryable failure), until one is delivered: their next batch
 * starts with one call (send's `probing`). Without it, a subscriber that
 * hangs was probed with one call only for its retries, and its new events
 * went DELIVERY_PARALLEL_CALLS at a time, each holding a place at its origin
 * until the response timeout.
 */
export class FailingSubscribers {
  private readonly ids = new Set<string>();

  has(subscriptionId: string): boolean {
    return this.ids.has(subscriptionId);
  }

  record(subscriptionId: string, verdict: Verdict): void {
    if (verdict.retried > 0 || verdict.exhausted !== undefined) {
      // Bounded: past this many, the oldest are forgotten (probed at their next retry still).
      if (this.ids.size >= 10_000) this.ids.delete(this.ids.values().next().value!);
      this.ids.add(subscriptionId);
    } else if (verdict.delivered) this.ids.delete(subscriptionId);
  }
}

/** Whether a batch's calls start with one probe (send's `probing`): its subscriber failed lately, or the batch holds a retry. */
export function startsWithProbe(failing: FailingSubscribers | undefined, subscriptionId: string, events: ClaimedEvent[]): boolean {
  return failing?.has(subscriptionId) === true || events.some((event) => event.attempts > 0);
}
