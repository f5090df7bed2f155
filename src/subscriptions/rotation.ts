import { sql } from 'kysely';
import { maxSecretRotationOverlapSeconds } from '../config/index.ts';
import type { Db } from '../db/database.ts';
import { FhirError, notFound, refusal } from '../fhir/outcome.ts';
import { headerName, secretValueProblem } from '../channels/rest-hook/element.ts';
import type { SecretBox } from './secrets.ts';
import { visibleTo, type Caller } from '../auth/api-keys.ts';
import { isUuid } from '../db/schema.ts';

/**
 * Rotating a subscription's signing secret without a gap (issue 28). The new
 * secret is the caller's, as a subscription's secret is at its creation (its
 * `secret` header): the receiver's owner chooses it, can put it in the
 * receiver before or after the rotation, and the service never has to show it.
 * It becomes the subscription's `secret` header (sent with every call and shown
 * in reads, as the specification has it for a client's secret); the secret
 * before it signs the calls too until the overlap ends (outboundHeaders in
 * src/channels/rest-hook/outbound.ts). Each rotation is recorded in
 * webhook.secret_rotations: who and when, never a secret.
 */

/** Who asks: an API client (its own subscriptions, or all with the admin scope), or an operator at the CLI, by user name. */
export type Rotator = { caller: Caller } | { operator: string };

export type RotationRequest = {
  /** The new secret, checked with checkedSecret. */
  secret: string;
  /** How long the previous secret signs calls too: 0 stops it at once. */
  overlapSeconds: number;
};

export type Rotation = {
  subscriptionId: string;
  rotatedAt: Date;
  /** Until when calls carry the previous secret's signatures too; rotatedAt when there is no overlap. */
  previousSecretUntil: Date;
};

/** A new secret as given, or a 400 in the spec's refusal format that says why without naming it. */
export function checkedSecret(secret: string): string {
  const problem = secretValueProblem(secret);
  if (problem !== undefined) throw refusal(`The new secret ${problem}`);
  return secret;
}

/** An overlap in seconds, or a 400: a whole number from 0 to 30 days. */
export function checkedOverlapSeconds(seconds: number): number {
  if (!Number.isSafeInteger(seconds) || seconds < 0 || seconds > maxSecretRotationOverlapSeconds) {
    throw refusal(`overlapSeconds must be a whole number of seconds from 0 to ${maxSecretRotationOverlapSeconds.toLocaleString('en')} (30 days)`);
  }
  return seconds;
}

/**
 * Gives Subscription/`subscriptionId` the new secret, keeping the current one
 * for the overlap, and records who did it, in one transaction. Throws a
 * FhirError: 404 not known (or another key's), 409 off, or still in the
 * overlap of a rotation (a receiver may hold only the oldest secret until it
 * ends: replacing the previous one would leave it refusing calls), 400 the
 * new secret is the current one.
 */
export async function rotateSigningSecret(db: Db, box: SecretBox, subscriptionId: string, request: RotationRequest, by: Rotator): Promise<Rotation> {
  return db.transaction().execute(async (transaction) => {
    const found = isUuid(subscriptionId)
      ? await visibleTo(transaction.selectFrom('webhook.subscriptions'), 'caller' in by ? by.caller : undefined)
          .select(['id', 'status', 'headers_encrypted', 'signing_secret_encrypted'])
          .select(
            sql<string | null>`CASE WHEN previous_secret_until > clock_timestamp() THEN fhir.format_instant(previous_secret_until) END`.as(
              'overlap_until_text',
            ),
          )
          .where('id', '=', subscriptionId)
          // Rotations, switch-offs and state changes of one subscription are made one after the other.
          .forUpdate()
          .executeTakeFirst()
      : undefined;
    if (found === undefined) throw notFound(`Subscription/${subscriptionId} is not known`);
    if (found.status === 'off')
      throw new FhirError(409, 'conflict', `Subscription/${found.id} is off: a subscription switched off is never called again, and has no secret to rotate`);
    if (found.overlap_until_text !== null) {
      throw new FhirError(
        409,
        'conflict',
        `Subscription/${found.id} is in the overlap of its last rotation until ${found.overlap_until_text}: its receiver may still hold only the secret before it. Rotate again once it has ended`,
      );
    }
    if (box.open(found.signing_secret_encrypted) === request.secret) throw refusal('The new secret is the current one: give another');

    // One instant for the row and its record, taken once the row is locked: the overlap is as long as asked.
    const rotatedAt = (await sql<{ now: Date }>`SELECT clock_timestamp() AS now`.execute(transaction)).rows[0]!.now;
    const previousSecretUntil = new Date(rotatedAt.getTime() + request.overlapSeconds * 1000);
    const headers = JSON.parse(box.open(found.headers_encrypted)) as string[];
    await transaction
      .updateTable('webhook.subscriptions')
      .set({
        signing_secret_encrypted: box.seal(request.secret),
        secret_is_generated: false,
        headers_encrypted: box.seal(JSON.stringify(withSecretHeader(headers, request.secret))),
        ...(request.overlapSeconds === 0
          ? { previous_signing_secret_encrypted: null, previous_secret_until: null }
          : { previous_signing_secret_encrypted: found.signing_secret_encrypted, previous_secret_until: previousSecretUntil }),
      })
      .where('id', '=', found.id)
      .execute();
    await transaction
      .insertInto('webhook.secret_rotations')
      .values({
        subscription_id: found.id,
        rotated_at: rotatedAt,
        rotated_by_api_key: 'caller' in by ? by.caller.apiKeyId : null,
        rotated_by_operator: 'operator' in by ? by.operator : null,
        previous_secret_until: previousSecretUntil,
      })
      .execute();
    return { subscriptionId: found.id, rotatedAt, previousSecretUntil };
  });
}

/**
 * The channel headers with the new secret as their `secret` item, where the
 * old one was (its name as the client wrote it), or last when the secret was
 * the service's own (a generated secret has no header).
 */
function withSecretHeader(headers: readonly string[], secret: string): string[] {
  const index = headers.findIndex((item) => headerName(item)?.toLowerCase() === 'secret');
  if (index === -1) return [...headers, `secret: ${secret}`];
  return headers.map((item, at) => (at === index ? `${headerName(item)!}: ${secret}` : item));
}
