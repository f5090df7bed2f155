import { ShutdownAbort } from '../channel.ts';

/** A call waiting for a place at its origin. */
type Waiter = { subscriptionId: string; admit: () => void };

type Origin = {
  inFlight: number;
  /** Calls in flight, by subscription. */
  bySubscription: Map<string, number>;
  waiting: Waiter[];
  /** When each subscription last got a place (a count of places given at the origin). */
  lastTurn: Map<string, number>;
  turns: number;
};

/**
 * The calls in flight to each receiver origin (scheme, host and port), at most
 * DELIVERY_MAX_CONNECTIONS_PER_ORIGIN: the delivery agent holds as many
 * connections to it, so a call never waits in undici's queue, which serves
 * the first come. Here, when an origin is full, the next place that frees
 * goes to the waiting call whose subscription has the fewest calls in flight
 * there, and among those to the one whose subscription had a place the
 * longest ago: subscriptions whose calls hang or crawl at an origin hold the
 * places they have, and the others there get the next one, not a place
 * behind all of theirs.
 */
export class OriginCalls {
  private readonly origins = new Map<string, Origin>();
  private readonly capacity: number;

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  /** A place for one call of the subscription to the endpoint's origin, once one is free; the function that gives it back. */
  async take(endpoint: string, subscriptionId: string, signal?: AbortSignal): Promise<() => void> {
    const key = new URL(endpoint).origin;
    let origin = this.origins.get(key);
    if (origin === undefined) this.origins.set(key, (origin = { inFlight: 0, bySubscription: new Map(), waiting: [], lastTurn: new Map(), turns: 0 }));
    if (origin.inFlight < this.capacity) hold(origin, subscriptionId);
    // Held for it by the call that gives its place back, before it resumes: no other call can take it meanwhile.
    else await this.wait(origin, subscriptionId, signal);
    const held = origin;
    let given = false;
    return () => {
      if (given) return;
      given = true;
      held.inFlight -= 1;
      const left = held.bySubscription.get(subscriptionId)! - 1;
      if (left === 0) held.bySubscription.delete(subscriptionId);
      else held.bySubscription.set(subscriptionId, left);
      this.admitNext(key, held);
    };
  }

  private wait(origin: Origin, subscriptionId: string, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        subscriptionId,
        admit: () => {
          signal?.removeEventListener('abort', abandon);
          resolve();
        },
      };
      // A shutdown while it waits: the call is not made (as a call cut short by it).
      const abandon = () => {
        origin.waiting.splice(origin.waiting.indexOf(waiter), 1);
        reject(new ShutdownAbort('the call waited for a place at its origin when the worker shut down; the job runs again'));
      };
      if (signal?.aborted) return abandon();
      signal?.addEventListener('abort', abandon, { once: true });
      origin.waiting.push(waiter);
    });
  }

  private admitNext(key: string, origin: Origin): void {
    if (origin.waiting.length === 0) {
      if (origin.inFlight === 0) this.origins.delete(key);
      return;
    }
    const inFlight = (waiter: Waiter) => origin.bySubscription.get(waiter.subscriptionId) ?? 0;
    const lastTurn = (waiter: Waiter) => origin.lastTurn.get(waiter.subscriptionId) ?? -1;
    let next = 0;
    for (let index = 1; index < origin.waiting.length; index += 1) {
      const candidate = origin.waiting[index]!;
      const best = origin.waiting[next]!;
      if (inFlight(candidate) < inFlight(best) || (inFlight(candidate) === inFlight(best) && lastTurn(candidate) < lastTurn(best))) next = index;
    }
    const [waiter] = origin.waiting.splice(next, 1);
    hold(origin, waiter!.subscriptionId);
    waiter!.admit();
  }
}

function hold(origin: Origin, subscriptionId: string): void {
  origin.lastTurn.set(subscriptionId, (origin.turns += 1));
  origin.inFlight += 1;
  origin.bySubscription.set(subscriptionId, (origin.bySubscription.get(subscriptionId) ?? 0) + 1);
}
