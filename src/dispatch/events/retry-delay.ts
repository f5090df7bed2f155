import type { Config } from '../../config/index.ts';
import type { Backoff } from '../../subscriptions/retry-policy.ts';

/** The longest Retry-After honoured: beyond it the configured delay applies. */
const retryAfterCapSeconds = 600;

/**
 * A subscription's retries: DELIVERY_MAX_FAILURES and DELIVERY_RETRY_DELAYS_MS,
 * or what its retry policy says instead (src/subscriptions/retry-policy.ts):
 * its own number of attempts, and a backoff in place of the list.
 */
export type RetrySchedule = Pick<Config['delivery'], 'maxFailures' | 'retryDelaysMs'> & { backoff?: Backoff | undefined };

/**
 * The delay before the attempt after `attempt` (1-based), or undefined when
 * that was the last one: an event (or a handshake) has `maxFailures`
 * attempts, spaced by the backoff or else `retryDelaysMs` (its last delay
 * repeating when the list is shorter), each delay jittered by ±20% so that
 * events failed together are not retried together. A Retry-After wins,
 * within its cap. `random` draws the jitter (in [0, 1), as Math.random).
 */
export function retryDelay(
  { maxFailures, retryDelaysMs, backoff }: RetrySchedule,
  attempt: number,
  retryAfterSeconds: number | undefined,
  random = Math.random,
): number | undefined {
  if (attempt >= maxFailures) return undefined;
  const configured =
    backoff === undefined
      ? retryDelaysMs[Math.min(attempt, retryDelaysMs.length) - 1]!
      : Math.min(backoff.firstDelayMs * backoff.growth ** (attempt - 1), backoff.maxDelayMs);
  const jittered = Math.round(configured * (0.8 + random() * 0.4));
  return retryAfterSeconds === undefined ? jittered : Math.max(jittered, Math.min(retryAfterSeconds, retryAfterCapSeconds) * 1000);
}
