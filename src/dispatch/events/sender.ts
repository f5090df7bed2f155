import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { DispatchContext } from '../subscriber.ts';
import { sendHeartbeat } from './heartbeats.ts';
import { eventsChannel, settleClaim } from './log.ts';
import { claimHeartbeats } from '../../db/sql/claim-heartbeats.ts';
import { rotatePendingEvents } from '../../db/sql/rotate-pending-events.ts';
import { claimCandidates, claimNextBatch, subscriptionsToClaim, type Candidates, type Claim } from '../../db/sql/claim-subscription-events.ts';
import { ClaimedBytes, type HeldBatches } from './delivery/claimed-bytes.ts';
import { deliverClaim, type Batch, type ClaimMore } from './delivery/deliver-claim.ts';
import { FailingSubscribers } from './delivery/judge.ts';
import { SettleBatches } from './delivery/settle-batches.ts';
import { TargetCache } from './delivery/target.ts';
import { loadVersions, versionsOf, type Versions } from './delivery/versions.ts';

/** Subscriptions claimed in one statement at most. */
const maxSubscriptionsPerClaim = 32;
/**
 * Once a delivery ends, the sender claims again when at least this share of
 * its concurrency is free (or nothing is left in flight): claiming for each
 * delivery that ended, one free slot at a time, made a write matching 1,000
 * subscriptions cost about 1,000 claims, most of the database's work. New
 * events (a NOTIFY) and the poll claim whatever is free.
 */
const refillShare = 1 / 4;
/** How often a sender looks for due events without being told: retries coming due, a notification missed while reconnecting. */
const pollIntervalMs = 1_000;
/**
 * The pending set's older generation is truncated about this often, by whichever sender's poll comes first, when it
 * holds at most pendingEventsMovedAtMost events (db/functions/webhook.rotate_pending_events.sql): the dead rows in the
 * claims' path are those of the last two periods however long a snapshot is held, and a rotation's lock is brief.
 */
const pendingEventsRotationSeconds = 5;
const pendingEventsMovedAtMost = 1_000;
/** How long a graceful stop lets the calls in flight finish before it aborts them. */
const gracefulStopMs = 5_000;

export type EventSender = {
  /** What its claims hold in webhook.subscription_claims.claimed_by (registered in webhook.worker_pools). */
  id: string;
  /** The subscriptions it is sending now. */
  working(): string[];
  /** Stops claiming, lets the calls in flight finish (for 5 s, then aborts them), and records what they did. */
  stop(): Promise<void>;
};

/**
 * Sends the subscription events of the log (src/dispatch/events/log.ts) in
 * this process: up to `concurrency` subscriptions at once, each claimed by one
 * sender at a time. It claims when the notification trigger's NOTIFY says a
 * statement recorded events, when a quarter of its slots are free again
 * after deliveries ended (their subscriptions may have more, and others may
 * wait), when its last delivery ends, and every second; every second too, the
 * heartbeats due (src/dispatch/events/heartbeats.ts) and, when due, the pending
 * set's rotation. Its id must be registered in
 * webhook.worker_pools before it starts (src/dispatch/worker.ts does).
 *
 * Its batches hold at most DELIVERY_MAX_CLAIMED_BYTES of resource versions
 * in all (ClaimedBytes), which every claim is bounded by.
 */
export function startEventSender(
  context: DispatchContext,
  { connectionString, concurrency, id }: { connectionString: string; concurrency: number; id: string },
): EventSender {
  const { logger } = context;
  const working = new Map<string, Promise<void>>();
  const refillAt = Math.min(maxSubscriptionsPerClaim, Math.max(1, Math.floor(concurrency * refillShare)));
  const targets = new TargetCache();
  const failing = new FailingSubscribers();
  const held = new ClaimedBytes(context.delivery.maxClaimedBytes);
  const settling = new SettleBatches(context.db);
  // Whether the loop waits for its batches to give bytes back: a delivery that ends then wakes it.
  let waitingForBytes = false;
  const shutdown = new AbortController();
  let stopping = false;
  // Whether there may be events to claim; wake() resumes the loop when it sleeps.
  let wanted = true;
  let wake = () => {};
  // The subscriptions to claim from, as the last scan found them (subscriptionsToClaim: a read of every subscription
  // with pending events), and what is left of this sender's share. The claims that refill the slots of ended
  // deliveries take them from here; new events (a NOTIFY) and the poll (retries come due) make the next claim scan again,
  // and so does a list used up.
  let candidates: Candidates = { share: 0, subscriptionIds: [] };
  let scanWanted = true;
  // Subscriptions this sender released with due events left, put first in the list by the loop.
  let releasedWithDueEvents: string[] = [];
  const nudge = ({ newEvents }: { newEvents: boolean }) => {
    wanted = true;
    if (newEvents) scanWanted = true;
    wake();
  };

  const listener = listenForEvents(
    connectionString,
    () => nudge({ newEvents: true }),
    logger,
    () => stopping,
  );
  const poll = setInterval(() => {
    nudge({ newEvents: true });
    void beatHearts();
    void rotatePending();
  }, pollIntervalMs);
  poll.unref();

  // The heartbeats due, claimed like events (never beside a notification of the same subscription), once a second.
  let beating = false;
  const beatHearts = async (): Promise<void> => {
    const free = Math.min(concurrency - working.size, maxSubscriptionsPerClaim);
    if (beating || stopping || free <= 0) return;
    beating = true;
    try {
      for (const due of await claimHeartbeats(context.db, id, free)) {
        // Stopped meanwhile: released unsent (the next period's heartbeat goes from another process, or after the restart).
        if (stopping) {
          await settleClaim(context.db, { senderId: id, subscriptionId: due.subscriptionId }, [], [], { resetFailureCount: false });
          continue;
        }
        const heartbeat = targets
          .get(context, due)
          .then((target) => sendHeartbeat(context, id, due, target, shutdown.signal))
          .catch((error: unknown) => logger.error({ err: error, subscriptionId: due.subscriptionId }, 'a heartbeat failed'))
          .finally(() => working.delete(due.subscriptionId));
        working.set(due.subscriptionId, heartbeat);
      }
    } catch (error) {
      logger.warn({ err: error }, 'could not claim heartbeats; trying again in 1 s');
    } finally {
      beating = false;
    }
  };

  let rotating = false;
  const rotatePending = async (): Promise<void> => {
    if (rotating || stopping) return;
    rotating = true;
    try {
      await rotatePendingEvents(context.db, pendingEventsRotationSeconds, pendingEventsMovedAtMost);
    } catch (error) {
      logger.warn({ err: error }, 'could not rotate the pending events; trying again in 1 s');
    } finally {
      rotating = false;
    }
  };

  const deliver = async (claim: Claim, versions: Promise<Versions>, holding: HeldBatches): Promise<void> => {
    try {
      const target = await targets.get(context, claim);
      // Changed since the claim (switched off, deactivated): its events were abandoned with the change.
      if (target?.status !== 'active') {
        await settleClaim(context.db, { senderId: id, subscriptionId: claim.subscriptionId }, [], [], { resetFailureCount: false });
        return;
      }
      const { leftDue } = await deliverClaim(context, id, claim, target, await versions, {
        settling,
        signal: shutdown.signal,
        claimMore: claimMore(claim.subscriptionId, holding),
        failing,
      });
      // Released with due events left: the oldest waiting, first in the list for the next claim (no NOTIFY tells of them).
      if (leftDue) releasedWithDueEvents.push(claim.subscriptionId);
    } catch (error) {
      // The calls made are sent again (at least once); the claim is freed now, or by the heartbeat within 15 s.
      logger.error({ err: error, subscriptionId: claim.subscriptionId }, 'a delivery of subscription events failed; its events will be sent again');
      await settleClaim(context.db, { senderId: id, subscriptionId: claim.subscriptionId }, [], [], { resetFailureCount: false }).catch(() => undefined);
    }
  };

  // The subscription's next batch, the claim kept, within its share of the bytes left; none once the
  // sender is stopping, or when nothing is left (its events then go in a claim after its release).
  const claimMore =
    (subscriptionId: string, holding: HeldBatches): ClaimMore =>
    async (afterEventId) => {
      // Asked while the batch ending with afterEventId is sent: the batches before it are done with.
      holding.keepLast();
      const maxBytes = held.shareFor(working.size);
      if (stopping || maxBytes <= 0) return noBatch;
      const giveBack = held.reserve(maxBytes);
      let next: Claim | undefined;
      try {
        next = await claimNextBatch(context.db, id, subscriptionId, afterEventId, maxBytes);
      } finally {
        giveBack();
      }
      if (next === undefined) return noBatch;
      holding.add(next.bytes);
      return { events: next.events, versions: await loadVersions(context.db, next.events), moreDue: next.moreDue };
    };

  const loop = (async () => {
    while (!stopping) {
      const free = Math.min(concurrency - working.size, maxSubscriptionsPerClaim);
      waitingForBytes = held.left <= 0;
      if (!wanted || free <= 0 || waitingForBytes) {
        await new Promise<void>((resolve) => (wake = resolve));
        continue;
      }
      wanted = false;
      // Half of the bytes left: the subscriptions it claims take their next batches out of the rest while they send.
      const maxBytes = Math.ceil(held.left / 2);
      const giveBack = held.reserve(maxBytes);
      let claims: Claim[];
      if (releasedWithDueEvents.length > 0) {
        candidates = { share: candidates.share + releasedWithDueEvents.length, subscriptionIds: [...releasedWithDueEvents, ...candidates.subscriptionIds] };
        releasedWithDueEvents = [];
      }
      const scanned = scanWanted || candidates.subscriptionIds.length === 0 || candidates.share <= 0;
      try {
        if (scanned) {
          scanWanted = false;
          candidates = await subscriptionsToClaim(context.db, id);
        }
        const wantedNow = Math.min(free, candidates.share);
        claims = wantedNow > 0 ? await claimCandidates(context.db, id, candidates.subscriptionIds, wantedNow, maxBytes) : [];
        candidates = candidatesLeft(candidates, claims);
      } catch (error) {
        logger.warn({ err: error }, 'could not claim subscription events; trying again in 1 s');
        await sleep(pollIntervalMs);
        continue;
      } finally {
        giveBack();
      }
      // A full claim may have left more behind; a list used up may not have held every subscription waiting.
      if (claims.length === free) wanted = true;
      else if (!scanned && candidates.subscriptionIds.length === 0) {
        scanWanted = true;
        wanted = true;
      }
      if (claims.length === 0) continue;
      // One read of the resource versions for all of them: a write matching many subscriptions is read once.
      const loaded = loadVersions(
        context.db,
        claims.flatMap((claim) => claim.events),
      );
      loaded.catch(() => undefined);
      for (const claim of claims) {
        const versions = loaded.then((all) => versionsOf(claim.events, all));
        versions.catch(() => undefined);
        const holding = held.hold(claim.bytes);
        working.set(
          claim.subscriptionId,
          deliver(claim, versions, holding).finally(() => {
            working.delete(claim.subscriptionId);
            holding.release();
            if (working.size === 0 || concurrency - working.size >= refillAt || (waitingForBytes && held.left > 0)) nudge({ newEvents: false });
          }),
        );
      }
    }
  })();

  return {
    id,
    working: () => [...working.keys()],
    stop: async () => {
      stopping = true;
      clearInterval(poll);
      wake();
      await loop;
      await listener.close();
      const finished = Promise.allSettled(working.values());
      // Unref'd: once the calls have finished, the grace period's timer must not hold the process for its 5 s.
      const timedOut = await Promise.race([finished.then(() => false), sleep(gracefulStopMs, true, { ref: false })]);
      if (timedOut) {
        shutdown.abort();
        await finished;
      }
    },
  };
}

/** What a claimMore gives when there is nothing more to send: the claim ends with the batch in flight. */
const noBatch: Batch = { events: [], versions: new Map(), moreDue: false };

/** A sender's id: its host and process, for whoever reads webhook.worker_pools, and a random part. */
export function newSenderId(): string {
  return `event-sender:${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
}

/**
 * LISTENs on `channel` (the notification trigger's, by default) on a
 * connection of its own (to the server itself: a transaction-mode pooler
 * cannot carry a LISTEN), calling `notified` with each notification's payload,
 * and without one once connected (again); connects again after an error (the
 * poll covers the gap).
 */
export function listenForEvents(
  connectionString: string,
  notified: (payload?: string) => void,
  logger: Pick<DispatchContext['logger'], 'warn'>,
  stopping: () => boolean,
  { channel = eventsChannel, applicationName = 'fhir-webhooks event listener' } = {},
): { close(): Promise<void> } {
  let client: pg.Client | undefined;
  let retry: NodeJS.Timeout | undefined;
  const connect = async () => {
    const next = new pg.Client({ connectionString, connectionTimeoutMillis: 5_000, application_name: applicationName });
    next.on('notification', (message) => notified(message.payload));
    next.on('error', (error) => {
      logger.warn({ err: error }, 'the event listener lost its database connection; connecting again');
      void next.end().catch(() => undefined);
      if (client === next) client = undefined;
      schedule();
    });
    try {
      await next.connect();
      await next.query(`LISTEN ${channel}`);
      if (stopping()) return void (await next.end());
      client = next;
      notified();
    } catch (error) {
      logger.warn({ err: error }, 'the event listener could not connect; trying again in 1 s');
      await next.end().catch(() => undefined);
      schedule();
    }
  };
  const schedule = () => {
    if (stopping() || retry !== undefined) return;
    retry = setTimeout(() => {
      retry = undefined;
      void connect();
    }, pollIntervalMs);
    retry.unref();
  };
  void connect();
  return {
    close: async () => {
      clearTimeout(retry);
      await client?.end().catch(() => undefined);
    },
  };
}

/**
 * The candidates a claim leaves: those after the last it claimed (it passed
 * over the ones before, claimed or sent elsewhere), none when it claimed
 * none (it found none free), and the share less what it claimed.
 */
function candidatesLeft(candidates: Candidates, claims: Claim[]): Candidates {
  const claimed = new Set(claims.map((claim) => claim.subscriptionId));
  const lastClaimed = candidates.subscriptionIds.findLastIndex((subscriptionId) => claimed.has(subscriptionId));
  return { share: candidates.share - claims.length, subscriptionIds: claims.length === 0 ? [] : candidates.subscriptionIds.slice(lastClaimed + 1) };
}
