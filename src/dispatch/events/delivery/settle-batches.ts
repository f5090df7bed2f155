import type { Db } from '../../../db/database.ts';
import { settleClaims, type ClaimSettlement } from '../log.ts';

/** At most this many claims in one statement: its parameters stay a few hundred kilobytes. */
const maxSettlementsPerStatement = 200;

type Waiting = { settlement: ClaimSettlement; settled: () => void; failed: (error: unknown) => void };

/**
 * A sender's settlements (src/dispatch/events/log.ts, settleClaims), written
 * as group commits: the first one goes at once, alone; those that come while
 * it is written go together in the next statement, and so on. A sender whose
 * deliveries end together (a write that matched a thousand subscriptions)
 * then settles them in a few statements instead of one each, and an idle one
 * waits for nothing.
 *
 * A subscription's settlements are written in the order they came, never two
 * in one statement (the second waits for the next). A statement that fails
 * is written again one settlement at a time, so that one claim's failure (its
 * subscription deleted meanwhile) is its own and not its neighbours'.
 */
export class SettleBatches {
  private readonly waiting: Waiting[] = [];
  private writing = false;
  private readonly db: Db;

  constructor(db: Db) {
    this.db = db;
  }

  /** Records the settlement; resolves once it is committed. */
  settle(settlement: ClaimSettlement): Promise<void> {
    return new Promise((settled, failed) => {
      this.waiting.push({ settlement, settled, failed });
      if (!this.writing) void this.writeWaiting();
    });
  }

  private async writeWaiting(): Promise<void> {
    this.writing = true;
    try {
      while (this.waiting.length > 0) await this.write(this.nextStatement());
    } finally {
      this.writing = false;
    }
  }

  /** The waiting settlements for one statement, in the order they came: at most one per subscription. */
  private nextStatement(): Waiting[] {
    const taken: Waiting[] = [];
    const left: Waiting[] = [];
    const subscriptions = new Set<string>();
    for (const waiting of this.waiting) {
      const { subscriptionId } = waiting.settlement;
      if (subscriptions.has(subscriptionId) || taken.length === maxSettlementsPerStatement) {
        left.push(waiting);
        continue;
      }
      subscriptions.add(subscriptionId);
      taken.push(waiting);
    }
    this.waiting.splice(0, this.waiting.length, ...left);
    return taken;
  }

  private async write(statement: Waiting[]): Promise<void> {
    try {
      await settleClaims(
        this.db,
        statement.map((waiting) => waiting.settlement),
      );
      for (const waiting of statement) waiting.settled();
    } catch (error) {
      if (statement.length === 1) return statement[0]!.failed(error);
      for (const waiting of statement) await settleClaims(this.db, [waiting.settlement]).then(waiting.settled, waiting.failed);
    }
  }
}
