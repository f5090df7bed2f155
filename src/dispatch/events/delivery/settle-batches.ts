import { sql } from 'kysely';
import pg from 'pg';
import type { Db } from '../../../db/database.ts';
import { settleClaims, type ClaimSettlement } from '../log.ts';

/** At most this many claims in one statement. */
const maxSettlementsPerStatement = 200;
/** And at most this many events' outcomes (each with its call's record): the statement's parameters stay a few megabytes. */
const maxOutcomesPerStatement = 2_000;

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
 * in one statement (the second waits for the next); its deliverClaim asks
 * for the next only once the one before is written.
 *
 * A statement of several settlements waits at most a second for a row locked
 * elsewhere (a subscription being deleted, an operator's transaction): it
 * must not hold every claim of the sender behind one. A statement the server
 * refused (that lock, a deadlock, a subscription deleted meanwhile) is
 * written again one settlement at a time, beside the statements that follow,
 * so that one claim's trouble is its own and not its neighbours'. One lost
 * with its connection fails all of its settlements, as it would have failed
 * each: it may have committed.
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

  /** The waiting settlements for one statement, in the order they came: at most one per subscription, and within the bounds (the first whatever its size). */
  private nextStatement(): Waiting[] {
    const taken: Waiting[] = [];
    const left: Waiting[] = [];
    const subscriptions = new Set<string>();
    let outcomes = 0;
    for (const waiting of this.waiting) {
      const { subscriptionId, outcomes: its } = waiting.settlement;
      const full = taken.length === maxSettlementsPerStatement || (taken.length > 0 && outcomes + its.length > maxOutcomesPerStatement);
      if (subscriptions.has(subscriptionId) || full) {
        left.push(waiting);
        continue;
      }
      subscriptions.add(subscriptionId);
      outcomes += its.length;
      taken.push(waiting);
    }
    this.waiting.splice(0, this.waiting.length, ...left);
    return taken;
  }

  private async write(statement: Waiting[]): Promise<void> {
    const settlements = statement.map((waiting) => waiting.settlement);
    try {
      if (settlements.length === 1) await settleClaims(this.db, settlements);
      else
        await this.db.transaction().execute(async (transaction) => {
          await sql`SET LOCAL lock_timeout = '1s'`.execute(transaction);
          await settleClaims(transaction, settlements);
        });
      for (const waiting of statement) waiting.settled();
    } catch (error) {
      // Written again claim by claim only after a server's error (pg.DatabaseError), which rolled the statement back:
      // one lost with its connection may have committed.
      if (statement.length === 1 || !(error instanceof pg.DatabaseError)) {
        for (const waiting of statement) waiting.failed(error);
        return;
      }
      for (const waiting of statement) void settleClaims(this.db, [waiting.settlement]).then(waiting.settled, waiting.failed);
    }
  }
}
