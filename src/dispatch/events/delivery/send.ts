import { call, type DispatchContext, type Target } from '../../subscriber.ts';
import { ShutdownAbort, type CallResult } from '../../../channels/channel.ts';
import type { NotificationOfEvents } from './build.ts';
import type { Pacer } from './pacer.ts';

/**
 * The send stage of a claim's delivery (src/dispatch/events/delivery/deliver-claim.ts):
 * the calls through the subscription's channel, paced and in lanes.
 */

/** What became of each notification: its call's result, `gone` (its version was deleted), or `unsent`. */
export type Sent = CallResult | 'gone' | 'unsent';

/**
 * Calls the subscriber for each notification (its body undefined: gone, not sent), in the claim's order, at most
 * `target.parallelCalls` at once: each lane starts its next call once its
 * last one was answered. With one lane (a topic-based subscription's
 * default) the subscriber gets the calls one after the other, in event-number
 * order. Stops starting calls after a retryable failure, or when the worker
 * shuts down (the call cut short counts as not sent).
 *
 * When `probing` (the subscriber failed lately: FailingSubscribers, or a retry in the batch), one
 * call goes first and the other lanes open only once it was answered without
 * a retryable failure: a subscriber that hangs holds one connection to its
 * origin, not DELIVERY_PARALLEL_CALLS, and healthy subscribers there keep
 * theirs (DELIVERY_MAX_CONNECTIONS_PER_ORIGIN).
 */
export async function send(
  context: DispatchContext,
  target: Target,
  notifications: NotificationOfEvents[],
  { pacer, probing, signal }: { pacer: Pacer | undefined; probing: boolean; signal: AbortSignal | undefined },
): Promise<Sent[]> {
  const results: Sent[] = notifications.map(() => 'unsent');
  let next = 0;
  let stop = false;
  const lane = async (calls = Number.POSITIVE_INFINITY): Promise<void> => {
    let called = 0;
    while (called < calls && !stop && next < notifications.length) {
      const index = next++;
      const { body, message, lastEventNumber } = notifications[index]!;
      if (body === undefined) {
        results[index] = 'gone';
        continue;
      }
      // A throttled subscriber's call waits for its slot; a shutdown meanwhile leaves it unsent.
      if (pacer !== undefined && !(await pacer.slot(signal))) {
        stop = true;
        return;
      }
      let result: CallResult;
      called += 1;
      try {
        result = await call(context, target, { body, message, type: 'event-notification', lastEventNumber }, signal);
      } catch (error) {
        if (!(error instanceof ShutdownAbort)) throw error;
        stop = true;
        return;
      }
      results[index] = result;
      if (result.verdict === 'retryable') stop = true;
    }
  };
  if (probing) await lane(1);
  await Promise.all(Array.from({ length: Math.min(target.parallelCalls, notifications.length) }, () => lane()));
  return results;
}
