import type { ReactivationRequestOutcome } from '../../db/schema.ts';
import { FhirError } from '../../fhir/outcome.ts';
import { reactivateOnRequest } from '../reactivation-on-request.ts';
import type { DispatchContext } from '../subscriber.ts';

/**
 * subscription_reactivation_request: an operator's `subscriptions reactivate`
 * (the CLI), carried out by a worker of the running service, so that the
 * handshake is this service's (its BASE_URL, SSRF and delivery settings,
 * OAuth client, secrets key) and not what the operator's shell happens to
 * set. The same as $reactivate (reactivateOnRequest); the outcome is written
 * on the request's row, which the CLI waits for. A request answered already,
 * or withdrawn by a CLI that stopped waiting, is left alone.
 */
export async function reactivationRequest(context: DispatchContext, { requestId }: { requestId: string }): Promise<void> {
  const request = await context.db
    .selectFrom('webhook.reactivation_requests')
    .select(['subscription_id', 'requested_by'])
    .where('id', '=', requestId)
    .where('outcome', 'is', null)
    .executeTakeFirst();
  if (request === undefined) return;
  let answer: { outcome: ReactivationRequestOutcome; http_status: number | null; detail: string | null };
  try {
    const done = await reactivateOnRequest(context, request.subscription_id, { operator: request.requested_by });
    answer = { outcome: done.meanwhile ? 'active meanwhile' : 'reactivated', http_status: done.httpStatus ?? null, detail: null };
  } catch (error) {
    if (!(error instanceof FhirError)) throw error;
    answer = { outcome: 'not reactivated', http_status: null, detail: error.message };
  }
  await context.db
    .updateTable('webhook.reactivation_requests')
    .set({ ...answer, answered_at: new Date() })
    .where('id', '=', requestId)
    .execute();
}
