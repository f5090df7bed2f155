import type { ClaimedEvent } from '../../../src/db/sql/claim-subscription-events.ts';
import type { CallResult } from '../../../src/channels/channel.ts';

/**
 * What the unit tests of a claim's delivery (src/dispatch/events/delivery/)
 * make their events and answers of, without a database or a receiver.
 */

/** The claimed event numbered `eventNumber`: Patient/<number>, version 1, not yet tried unless `attempts` says so. */
export function claimedEvent(eventNumber: number, { attempts = 0 }: { attempts?: number } = {}): ClaimedEvent {
  const resource = { resourceType: 'Patient', resourceId: String(eventNumber), versionId: 1, deleted: false };
  return { eventId: String(1000 + eventNumber), eventNumber, ...resource, attempts, bytes: 100 };
}

/** The events numbered from..to, in order. */
export function claimedEvents(from: number, to: number, options: { attempts?: number } = {}): ClaimedEvent[] {
  return Array.from({ length: to - from + 1 }, (_, index) => claimedEvent(from + index, options));
}

/** A channel's answer with this verdict (a 200, a 503 or a 404), started at `startedAt`. */
export function callResult(
  verdict: CallResult['verdict'],
  { retryAfterSeconds, startedAt = new Date('2026-01-01T00:00:00Z') }: Partial<CallResult> = {},
): CallResult {
  const httpStatus = { delivered: 200, retryable: 503, permanent: 404 }[verdict];
  return {
    verdict,
    httpStatus,
    error: verdict === 'delivered' ? undefined : `HTTP ${httpStatus}`,
    responseExcerpt: undefined,
    retryAfterSeconds,
    startedAt,
    durationMs: 5,
  };
}
