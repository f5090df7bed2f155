/**
 * The bytes of resource versions the sender's batches hold, as their claims
 * counted them (each version uncompressed, about its JSON text's size),
 * against DELIVERY_MAX_CLAIMED_BYTES. A subscription being sent holds the
 * batch in flight and, from the time it is claimed, the next one
 * (claimMore): each counted from its claim until the subscription asks for
 * the batch after it (that one is then done with) or its delivery ends.
 *
 * A claim made while others are under way counts what it may take
 * (reserve), so that together they stay within the bound. A new claim takes
 * at most half of what is left and a next batch its share (shareFor), and
 * none is made when nothing is left; a new claim always takes one event,
 * whatever its size, so the batches can hold one version more than the
 * bound: one larger than what was left, or alone larger than the bound.
 */
export class ClaimedBytes {
  private held = 0;
  private readonly max: number;
  constructor(max: number) {
    this.max = max;
  }

  /** What is left of the bound: 0 or less when it is all held. */
  get left(): number {
    return this.max - this.held;
  }

  /**
   * What a subscription's next batch may take: what is left, but no more than
   * a quarter of it, or an even share of the bound between the subscriptions
   * being sent to when that is more, so that those asking at the same time
   * are not left without.
   */
  shareFor(subscriptionsSending: number): number {
    return Math.min(this.left, Math.max(Math.ceil(this.left / 4), Math.ceil(this.max / Math.max(subscriptionsSending, 1))));
  }

  /** Counts `bytes` while a claim that may take them is made; the function returned gives them back. */
  reserve(bytes: number): () => void {
    this.held += bytes;
    return () => {
      this.held -= bytes;
    };
  }

  /** The batches of one subscription's delivery, from its claim's `bytes`. */
  hold(bytes: number): HeldBatches {
    const batches = [bytes];
    this.held += bytes;
    return {
      add: (next) => {
        batches.push(next);
        this.held += next;
      },
      keepLast: () => {
        while (batches.length > 1) this.held -= batches.shift()!;
      },
      release: () => {
        while (batches.length > 0) this.held -= batches.shift()!;
      },
    };
  }
}

/** What one subscription's delivery holds: its batches' bytes, oldest first. */
export type HeldBatches = {
  /** A next batch claimed. */
  add(bytes: number): void;
  /** The batches before the last are done with. */
  keepLast(): void;
  /** The delivery ended: every batch is done with. */
  release(): void;
};
