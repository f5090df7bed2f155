import type { Config } from '../../config/index.ts';

/** The longest Retry-After honoured: beyond it the configured delay applies. */
const retryAfterCapSeconds = 600;

/** DELIVERY_MAX_FAILURES and DELIVERY_RETRY_DELAYS_MS. */
export type RetrySchedule = Pick<Config['delivery'], 'maxFailures' | 'retryDelaysMs'>;

/**
 * The delay before the attempt after `attempt` (1-based), or undefined when
 * that was the last one: an event (or a handshake) has DELIVERY_MAX_FAILURES
 * attempts, spaced by DELIVERY_RETRY_DELAYS_MS (its last delay repeating when
 * the list is shorter), each delay jittered by ±20% so that events failed
 * together are not retried together. A Retry-After wins, within its cap.
 * `random` draws the jitter (in [0, 1), as Math.random).
 */
export function retryDelay(
  { maxFailures, retryDelaysMs }: RetrySchedule,
  attempt: number,
  retryAfterSeconds: number | undefined,
  random = Math.random,
): number | undefined {
  if (attempt >= maxFailures) return undefined;
  const configured = retryDelaysMs[Math.min(attempt, retryDelaysMs.length) - 1]!;
  const jittered = Math.round(configured * (0.8 + random() * 0.4));
  return retryAfterSeconds === undefined ? jittered : Math.max(jittered, Math.min(retryAfterSeconds, retryAfterCapSeconds) * 1000);
}
