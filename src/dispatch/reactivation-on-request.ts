import { randomUUID } from 'node:crypto';
import type { Db } from '../db/database.ts';
import { isUuid, type SubscriptionStatus } from '../db/schema.ts';
import { loadTarget, type CallContext } from './subscriber.ts';
import { reactivationHandshake } from './tasks/reactivation.ts';
import { FhirError, notFound } from '../fhir/outcome.ts';
import { isSuperseded } from '../db/sql/subscription-is-superseded.ts';
import { visibleTo, type Caller } from '../auth/api-keys.ts';

/**
 * Reactivation on an operator's request: a subscription in `error` whose
 * receiver has been fixed is sent the reactivation handshake now, rather than
 * at its next matching event (the specification's path, which stays). The
 * same handshake, record and change as an event's (reactivationHandshake in
 * src/dispatch/tasks/reactivation.ts): on 2xx it is `active`, its failure
 * count reset; the events it missed while in `error` are not sent ($events
 * and $resend fetch and send them). The request waits for the call, bounded
 * by DELIVERY_RESPONSE_TIMEOUT_MS, and is not held by the wait that keeps a
 * flapping subscriber in `error` (webhook.reactivation_backoff): the operator
 * says the receiver is fixed. Like an event's, a successful handshake does not
 * end that run of deactivations (a delivery does), and a failed one does not
 * lengthen it. One reactivation handshake at a time per subscription: a request
 * that comes while another is in flight (an event's, another request's) waits
 * for it, and is answered as it left the subscription.
 */

/** What the request came to, when the subscription is active after it. */
export type OnRequestReactivation = {
  /** The receiver's answer to this request's handshake; undefined when another reactivation's made it active first and this one sent none. */
  httpStatus: number | undefined;
  /** Another reactivation (an event's, another request's) made it active while this handshake was in flight. */
  meanwhile: boolean;
};

/** Who asks: an API client (its own subscriptions, or all with the admin scope), or an operator at the CLI (all; its OS user, for the log). */
export type Requester = { caller: Caller } | { operator: string };

/**
 * Reactivates Subscription/`subscriptionId` now, for `requester`. Throws a
 * FhirError: 404 not known (or another key's), 409 not in `error` or
 * superseded, 502 the handshake failed (the subscription stays in `error` with
 * the new reason).
 */
export async function reactivateOnRequest(context: CallContext, subscriptionId: string, requester: Requester): Promise<OnRequestReactivation> {
  const caller = 'caller' in requester ? requester.caller : undefined;
  const found = isUuid(subscriptionId)
    ? await visibleTo(context.db.selectFrom('webhook.subscriptions'), caller).select(['id', 'status']).where('id', '=', subscriptionId).executeTakeFirst()
    : undefined;
  if (found === undefined) throw notFound(`Subscription/${subscriptionId} is not known`);
  const refusal = await whyNotReactivated(context.db, found);
  if (refusal !== undefined) throw refusal;
  const target = await loadTarget(context, found.id);
  if (target === undefined) throw notFound(`Subscription/${subscriptionId} is not known`);
  // Each request is a message of its own (its webhook-id): the service never sends it again.
  const handshake = await reactivationHandshake(context, target, { message: `reactivation handshake requested ${randomUUID()}` });
  if (handshake === undefined) return answerAsLeft(context.db, found.id, undefined);
  const { result, reason, reactivated } = handshake;
  const requestedBy = 'caller' in requester ? `API key ${requester.caller.apiKeyId}` : `operator ${requester.operator} (CLI)`;
  if (result.verdict !== 'delivered') {
    context.logger.info({ subscriptionId: found.id, requestedBy, reason }, 'subscription reactivation on request failed; still in error');
    throw new FhirError(502, 'transient', `Subscription/${found.id} was not reactivated. ${reason}`);
  }
  if (reactivated) {
    context.logger.info({ subscriptionId: found.id, requestedBy }, 'subscription reactivated on request');
    return { httpStatus: result.httpStatus, meanwhile: false };
  }
  return answerAsLeft(context.db, found.id, result.httpStatus);
}

/**
 * Another reactivation changed the subscription while this request waited for
 * its turn or its handshake was in flight: active is what was asked; anything
 * else is refused as it now is.
 */
async function answerAsLeft(db: Db, id: string, httpStatus: number | undefined): Promise<OnRequestReactivation> {
  const now = await db.selectFrom('webhook.subscriptions').select(['id', 'status']).where('id', '=', id).executeTakeFirstOrThrow();
  if (now.status === 'active') return { httpStatus, meanwhile: true };
  throw (await whyNotReactivated(db, now)) ?? new FhirError(409, 'conflict', `Subscription/${id} changed while its handshake was in flight: ask again`);
}

/** Why a subscription cannot be reactivated (409), or undefined when it can: in `error`, and not superseded. */
async function whyNotReactivated(db: Db, { id, status }: { id: string; status: SubscriptionStatus }): Promise<FhirError | undefined> {
  const conflict = (why: string) => new FhirError(409, 'conflict', `Subscription/${id} ${why}`);
  switch (status) {
    case 'active':
      return conflict('is active: only a subscription in error is reactivated');
    case 'requested':
      return conflict('is requested: its handshake is under way (or waiting for its retry), and decides; only a subscription in error is reactivated');
    case 'off':
      return conflict('is off: a subscription switched off never comes back; create a new one');
  }
  if (await isSuperseded(db, id)) {
    return conflict(
      'is superseded: a newer subscription exists for its criteria, and a superseded subscription is never called again (switching the criteria off ends it)',
    );
  }
  return undefined;
}
