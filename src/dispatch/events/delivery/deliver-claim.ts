import type { DispatchContext, Target } from '../../subscriber.ts';
import type { Claim, ClaimedEvent } from '../../../db/sql/claim-subscription-events.ts';
import { notificationsOf } from './build.ts';
import { judge, startsWithProbe, withoutFailures, type FailingSubscribers } from './judge.ts';
import { Pacer } from './pacer.ts';
import { send } from './send.ts';
import { observeLatencies, settle } from './settle.ts';
import type { SettleBatches } from './settle-batches.ts';
import type { Versions } from './versions.ts';

/**
 * A claim's delivery as its stages, each in its own file here: the target
 * (target.ts: the subscription as a sender sees it), build (build.ts: the
 * notifications of a batch's events), send (send.ts and pacer.ts: the calls
 * through its channel), judge (judge.ts: what the answers come to, and the
 * failing subscribers) and settle (settle.ts: the verdict written, the claim
 * released or kept). The sender (src/dispatch/events/sender.ts) reads the
 * versions its claims name (versions.ts) and bounds the bytes its batches
 * hold (claimed-bytes.ts).
 */

/**
 * Batches of one subscription a sender sends without releasing it
 * (webhook.claim_more_subscription_events): a retry that comes due meanwhile,
 * which only a new claim takes, waits for at most this many.
 */
const maxBatchesPerClaim = 10;

/** Events of the claimed subscription with the versions they name, and whether due events were left out of them (the claim's moreDue). */
export type Batch = { events: ClaimedEvent[]; versions: Versions; moreDue: boolean };

/**
 * The claimed subscription's next due events after the event given (none
 * when the claim ends). Asked while the batch ending with that event is
 * sent, when every batch before it is done with: the sender counts the
 * bytes its batches hold by these calls (src/dispatch/events/sender.ts).
 */
export type ClaimMore = (afterEventId: string) => Promise<Batch>;

/**
 * A claim's delivery: the events of one active subscription, in log order,
 * as notifications (one event each, or up to a topic-based subscription's
 * max-count: notificationsOf), at most `target.parallelCalls` calls in
 * flight to the subscriber (one at a time, in event-number order, for a
 * topic-based subscription that does not ask for more). The claim has
 * already set aside the versions the subscriber must not get (an older one
 * after a newer) and numbered the rest. While a full batch is sent, the
 * subscription's next events are claimed (`claimMore`), and sent as soon as
 * the batch's calls are done, while the batch is recorded: a long stream
 * does not wait between batches.
 *
 * A call's answer decides every event it carries. Attempts are counted per
 * event (the events of one notification have the same count): a retryable
 * failure is tried again with jittered spacing, up to DELIVERY_MAX_FAILURES
 * attempts, and the last one failing deactivates the subscription; a
 * permanent one ends the notification's events and counts one more
 * notification in a row refused for good (DELIVERY_MAX_FAILURES of them
 * deactivate). After a retryable failure no new call starts: the subscriber
 * is likely down, and the events not yet sent wait for the retry with the
 * failed ones; after any failure the claim ends with its batch. Each batch
 * is recorded in the sender's next statement of settlements (`settling`)
 * when all went well, else in one transaction with the state changes that
 * follow, the claim released. Says whether due events of the subscription
 * were left behind (after maxBatchesPerClaim batches, or when the sender had
 * no bytes for more), for the sender to claim it again first.
 */
export async function deliverClaim(
  context: DispatchContext,
  senderId: string,
  claim: Claim,
  target: Target,
  versions: Versions,
  { settling, signal, claimMore, failing }: { settling: SettleBatches; signal?: AbortSignal; claimMore?: ClaimMore; failing?: FailingSubscribers },
): Promise<{ leftDue: boolean }> {
  let batch: Batch = { events: claim.events, versions, moreDue: claim.moreDue };
  let recorded = Promise.resolve();
  const pacer = target.maxCallsPerSecond === undefined ? undefined : await Pacer.resume(context.db, target.id, target.maxCallsPerSecond);
  try {
    for (let round = 1; ; round += 1) {
      // A batch that left due events out (maxEventsPerClaim, or the sender's bytes) has more behind it:
      // asked for now, and sent after this one (the same resources' newer versions among them).
      const following = claimMore !== undefined && batch.moreDue && round < maxBatchesPerClaim ? claimMore(batch.events.at(-1)!.eventId) : undefined;
      following?.catch(() => undefined);
      const notifications = await notificationsOf(context, target, batch.events, batch.versions);
      const probing = startsWithProbe(failing, target.id, batch.events);
      const results = await send(context, target, notifications, { pacer, probing, signal });
      const verdict = judge(context, target, notifications, results);
      failing?.record(target.id, verdict);
      const next = following !== undefined && withoutFailures(verdict) && signal?.aborted !== true ? await following.catch(() => undefined) : undefined;
      const goingOn = next !== undefined && next.events.length > 0;
      // Batches are recorded in order: the release comes after every batch before it.
      await recorded;
      recorded = settle(context, settling, senderId, target, verdict, { keepClaim: goingOn, nextCallAt: pacer?.nextCallAt });
      observeLatencies(context, notifications, results);
      if (!goingOn) {
        await recorded;
        return { leftDue: batch.moreDue };
      }
      // Awaited before the next batch is recorded; a failure then fails the claim.
      recorded.catch(() => undefined);
      batch = next;
    }
  } catch (error) {
    // The batch before is recorded (or has failed) before the caller releases the claim: a release first would let another sender take its events again.
    await recorded.catch(() => undefined);
    throw error;
  }
}
