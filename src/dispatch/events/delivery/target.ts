import { loadTarget, type DispatchContext, type Target } from '../../subscriber.ts';
import type { Claim } from '../../../db/sql/claim-subscription-events.ts';

/**
 * The target stage of a claim's delivery (src/dispatch/events/delivery/deliver-claim.ts):
 * what the claim's events go to, the subscription as a sender sees it
 * (src/dispatch/delivery.ts, Target).
 */

/**
 * The subscriptions as the sender last read them (secrets decrypted), reused
 * while their versionId is the one a claim reports: a busy subscription is
 * read once, not once per claim.
 */
export class TargetCache {
  private readonly byId = new Map<string, { version: number; target: Target | undefined }>();

  async get(context: DispatchContext, claim: Pick<Claim, 'subscriptionId' | 'subscriptionVersion'>): Promise<Target | undefined> {
    const cached = this.byId.get(claim.subscriptionId);
    if (cached?.version === claim.subscriptionVersion) return cached.target;
    const target = await loadTarget(context, claim.subscriptionId);
    // Bounded: a process serving more subscriptions than this reads some again.
    if (this.byId.size >= 10_000) this.byId.clear();
    this.byId.set(claim.subscriptionId, { version: claim.subscriptionVersion, target });
    return target;
  }
}
