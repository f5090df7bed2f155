import { setTimeout as sleep } from 'node:timers/promises';
import type { Db } from '../../../db/database.ts';
import { nextCallAt } from '../log.ts';

/**
 * Spaces a throttled subscription's calls 1/rate apart, across the lanes and
 * batches of one claim, from where the sender before it left off
 * (webhook.subscription_streams.next_call_at): the limit holds whichever
 * worker process sends. A subscription idle for a while gets its next call
 * at once, then the spacing again.
 */
export class Pacer {
  private next: number;
  private readonly intervalMs: number;
  /** `leftAt`: where the sender before left off (null: none did); `now`: the clock's time (Date.now()). */
  constructor(callsPerSecond: number, leftAt: Date | null, now = Date.now()) {
    this.intervalMs = 1000 / callsPerSecond;
    this.next = Math.max(now, leftAt?.getTime() ?? 0);
  }

  static async resume(db: Db, subscriptionId: string, callsPerSecond: number): Promise<Pacer> {
    return new Pacer(callsPerSecond, await nextCallAt(db, subscriptionId));
  }

  /** Reserves the next call's slot (at once, so that lanes take turns): how long after `now` it starts (0 or less: at once). */
  reserve(now = Date.now()): number {
    const at = Math.max(now, this.next);
    this.next = at + this.intervalMs;
    return at - now;
  }

  /** Waits for the next call's slot (reserved at once, so that lanes take turns); false when a shutdown cut the wait short. */
  async slot(signal?: AbortSignal): Promise<boolean> {
    const wait = this.reserve();
    if (wait <= 0) return true;
    try {
      await sleep(wait, undefined, signal === undefined ? {} : { signal });
      return true;
    } catch {
      return false;
    }
  }

  /** The earliest the call after the last one reserved may start. */
  get nextCallAt(): Date {
    return new Date(this.next);
  }
}
