import { randomBytes } from 'node:crypto';
import { sql, type Selectable } from 'kysely';
import pg from 'pg';
import type { Db } from '../db/database.ts';
import { enqueueJob } from '../dispatch/tasks/jobs.ts';
import { subscriptionStatuses, type FhirResource, type SubscriptionStatus, type SubscriptionsTable } from '../db/schema.ts';
import { notFound } from '../fhir/outcome.ts';
import { splitQuery } from '../search/query.ts';
import { endpointColumns, storedEndpoint, wholeEndpoint } from './endpoints.ts';
import { parseSubscriptionRequest, refusal, type SubscriptionRequest } from './requests.ts';
import type { SecretBox } from './secrets.ts';

/** What rendering and storing a subscription needs besides the database. */
export type SubscriptionContext = {
  box: SecretBox;
  /** Public base URL, without a trailing slash. */
  baseUrl: string;
  /** Last path segment of the identifier tag's system. */
  namingSystem: string;
};

/**
 * Who asks: an API key, and whether it may see and switch off every
 * subscription (the admin scope) or only those it created.
 */
export type Caller = { apiKeyId: string; admin: boolean };

export const subscriptionsAreImmutable =
  'Subscriptions cannot be updated or deleted: switch it off (POST with status off and the same criteria) and create a new one';

type Row = Selectable<SubscriptionsTable> & { last_updated_text: string; ended_at_text: string | null; created_at_text: string };

/**
 * POST /Subscription: creates a subscription (status requested) and enqueues
 * its handshake in the same transaction, or switches off the live one with
 * the same criteria (status off). `created` tells which.
 */
export async function submitSubscription(db: Db, context: SubscriptionContext, body: unknown, caller: Caller): Promise<{ created: boolean; resource: FhirResource }> {
  const request = parseSubscriptionRequest(body);
  if (request.status === 'off') return { created: false, resource: render(await switchOff(db, request.criteria, caller), context, 'stored') };
  const row = await inTransaction(db, (transaction) => create(transaction, context, request, caller));
  return { created: true, resource: render(row, context, { echoReason: request.reason }) };
}

/** A subscription another key created is, to a key without the admin scope, not known. */
export async function readSubscription(db: Db, context: SubscriptionContext, id: string, caller: Caller): Promise<FhirResource> {
  const row = isUuid(id) ? await visibleTo(selectRows(db), caller).where('id', '=', id).executeTakeFirst() : undefined;
  if (!row) throw notFound(`Subscription/${id} is not known`);
  return render(row, context, 'stored');
}

export type SubscriptionPage = { resources: FhirResource[]; nextPageToken?: string };

const defaultCount = 20;
const maxCount = 1000;

/**
 * GET /Subscription: `_count`, `_page_token`, `_tag` (`system|identifier`),
 * `criteria` (the exact criteria string), `url` (the exact endpoint) and
 * `status`, in creation order, keyset-paged.
 */
export async function searchSubscriptions(db: Db, context: SubscriptionContext, rawQuery: string, caller: Caller): Promise<SubscriptionPage> {
  let query = visibleTo(selectRows(db), caller);
  let count = defaultCount;
  let endpoint: string | undefined;
  for (const [name, value] of splitQuery(rawQuery)) {
    switch (name) {
      case '_count':
        if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > maxCount) throw refusal(`_count must be an integer from 1 to ${maxCount}`);
        count = Number(value);
        break;
      case '_page_token': {
        const [createdAt, id] = decodePageToken(value);
        query = query.where(sql<boolean>`(created_at, id) > (${createdAt}::timestamptz, ${id}::uuid)`);
        break;
      }
      case '_tag': {
        const [system, code] = value.split('|');
        if (system !== tagSystem(context) || code === undefined || !isUuid(code)) return { resources: [] };
        query = query.where('identifier', '=', code);
        break;
      }
      case 'criteria':
        query = query.where('criteria', '=', value);
        break;
      case 'url':
        // An endpoint with credentials is stored as shown: the rows shown alike are told apart once read (below).
        query = query.where('endpoint', '=', storedEndpoint(value));
        endpoint = value;
        break;
      case 'status': {
        const statuses = value.split(',');
        if (!statuses.every(isStatus)) throw refusal('status must be requested, active, error or off');
        query = query.where('status', 'in', statuses);
        break;
      }
      default:
        throw refusal(`Unknown search parameter '${name}' for Subscription (supported: _count, _page_token, _tag, criteria, url, status)`);
    }
  }
  const ordered = query.orderBy('created_at').orderBy('id');
  // With url=, the rows shown alike are told apart before the page is cut (they are few: one endpoint's).
  const rows =
    endpoint === undefined
      ? await ordered.limit(count + 1).execute()
      : (await ordered.execute()).filter((row) => wholeEndpoint(row, context.box) === endpoint).slice(0, count + 1);
  const page = rows.slice(0, count);
  const last = page.at(-1);
  return {
    resources: page.map((row) => render(row, context, 'stored')),
    ...(rows.length > count && last ? { nextPageToken: encodePageToken(last.created_at_text, last.id) } : {}),
  };
}

async function create(db: Db, context: SubscriptionContext, request: Extract<SubscriptionRequest, { status: 'requested' }>, caller: Caller): Promise<Row> {
  const signingSecret = request.clientSecret ?? randomBytes(32).toString('base64url');
  const { id } = await db
    .insertInto('webhook.subscriptions')
    .values({
      status: 'requested',
      criteria: request.criteria,
      resource_type: request.compiled.resourceType,
      compiled_criteria: JSON.stringify(request.compiled),
      match: request.compiled.match,
      match_deleted: request.compiled.matchDeleted,
      related_match: request.compiled.relatedMatch === null ? null : JSON.stringify(request.compiled.relatedMatch),
      ...endpointColumns(request.endpoint, context.box),
      payload: request.payload ?? null,
      headers_encrypted: context.box.seal(JSON.stringify(request.headers)),
      signing_secret_encrypted: context.box.seal(signingSecret),
      secret_is_generated: request.clientSecret === undefined,
      reason: request.reason,
      contact_emails: request.contactEmails,
      error: null,
      ended_at: null,
      created_by_api_key: caller.apiKeyId,
    })
    .returning('id')
    .executeTakeFirstOrThrow()
    .catch((error: unknown) => {
      if (error instanceof pg.DatabaseError && error.constraint === 'subscriptions_one_live_per_criteria') {
        throw refusal(
          `A live (requested or active) subscription already exists for criteria=${request.criteria} (constraint subscriptions_one_live_per_criteria): switch it off first`,
        );
      }
      throw error;
    });
  // In the creating transaction: the handshake is enqueued if and only if the subscription commits.
  await enqueueJob(db, 'subscription_handshake', { subscriptionId: id }, { jobKey: `handshake:${id}` });
  return selectRows(db).where('id', '=', id).executeTakeFirstOrThrow();
}

/**
 * Switches a criteria off: every subscription for it that is not off yet
 * becomes off — the live one, and those in error (superseded by it or not),
 * so that nothing is called for this criteria again. The answer is the live
 * one, else the latest in error. (The spec leaves switching off a subscription
 * in error open; a client expects it to end rather than be reactivated later.)
 */
async function switchOff(db: Db, criteria: string, caller: Caller): Promise<Row> {
  const ending = await visibleTo(db.selectFrom('webhook.subscriptions'), caller)
    .select(['id', 'status'])
    .where('criteria', '=', criteria)
    .where('status', '!=', 'off')
    .orderBy('created_at', 'desc')
    .execute();
  const shown = ending.find((row) => row.status === 'requested' || row.status === 'active') ?? ending[0];
  if (!shown) throw refusal(`Not found webhook active or requested for criteria=${criteria}`);
  await db
    .updateTable('webhook.subscriptions')
    .set({ status: 'off', ended_at: sql<Date>`clock_timestamp()` })
    .where('id', 'in', ending.map((row) => row.id))
    .where('status', '!=', 'off')
    .execute();
  return selectRows(db).where('id', '=', shown.id).executeTakeFirstOrThrow();
}

/** The subscriptions a caller may see: all with the admin scope, else those its key created. */
export function visibleTo<Query extends { where: (column: 'created_by_api_key', operator: '=', value: string) => Query }>(query: Query, caller: Caller): Query {
  return caller.admin ? query : query.where('created_by_api_key', '=', caller.apiKeyId);
}

function selectRows(db: Db) {
  return db
    .selectFrom('webhook.subscriptions')
    .selectAll()
    .select([
      sql<string>`fhir.format_instant(last_updated)`.as('last_updated_text'),
      sql<string | null>`fhir.format_instant(ended_at)`.as('ended_at_text'),
      sql<string>`fhir.format_instant(created_at)`.as('created_at_text'),
    ]);
}

/**
 * The stored subscription as a FHIR Subscription. Reads show `reason` as "-"
 * (the spec's rule); the create response echoes what was sent. The headers
 * are the client's own, its `secret` included; a generated secret is never shown.
 */
function render(row: Row, context: SubscriptionContext, reason: 'stored' | { echoReason: string }): FhirResource {
  const headers = JSON.parse(context.box.open(row.headers_encrypted)) as string[];
  return {
    resourceType: 'Subscription',
    id: row.id,
    meta: { versionId: String(row.version_id), lastUpdated: row.last_updated_text, tag: [{ system: tagSystem(context), code: row.identifier }] },
    status: row.status,
    ...(row.contact_emails.length === 0 ? {} : { contact: row.contact_emails.map((value) => ({ system: 'email', value })) }),
    ...(row.ended_at_text === null ? {} : { end: row.ended_at_text }),
    reason: reason === 'stored' ? '-' : reason.echoReason,
    criteria: row.criteria,
    ...(row.error === null ? {} : { error: row.error }),
    channel: {
      type: 'rest-hook',
      endpoint: wholeEndpoint(row, context.box),
      ...(row.payload === null ? {} : { payload: row.payload }),
      ...(headers.length === 0 ? {} : { header: headers }),
    },
  };
}

function tagSystem(context: SubscriptionContext): string {
  return `${context.baseUrl}/fhir/resources/NamingSystem/${context.namingSystem}`;
}

async function inTransaction<T>(db: Db, work: (transaction: Db) => Promise<T>): Promise<T> {
  return db.isTransaction ? work(db) : db.transaction().execute(work);
}

function isUuid(text: string): boolean {
  return /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(text);
}

function isStatus(text: string): text is SubscriptionStatus {
  return (subscriptionStatuses as readonly string[]).includes(text);
}

function encodePageToken(createdAt: string, id: string): string {
  return Buffer.from(JSON.stringify([createdAt, id])).toString('base64url');
}

function decodePageToken(token: string): [string, string] {
  try {
    const [createdAt, id] = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as unknown[];
    if (typeof createdAt === 'string' && typeof id === 'string' && isUuid(id)) return [createdAt, id];
  } catch {
    // fall through to the refusal
  }
  throw refusal('Invalid _page_token: use the next link of the previous page');
}


/**
 * Encrypts the credentials of the endpoints stored before migration 0015,
 * which the database could not encrypt (it has no key): run by the service at
 * start, once the migrations are applied. Returns how many it encrypted.
 */
export async function encryptEndpointCredentials(db: Db, box: SecretBox): Promise<number> {
  const plain = await db
    .selectFrom('webhook.subscriptions')
    .select(['id', 'endpoint'])
    .where('endpoint_encrypted', 'is', null)
    .where((eb) => eb.or([eb('endpoint', 'like', '%@%'), eb('endpoint', 'like', '%?%')]))
    .execute();
  let encrypted = 0;
  for (const row of plain) {
    const columns = endpointColumns(row.endpoint, box);
    if (columns.endpoint_encrypted === null) continue;
    const { numUpdatedRows } = await db
      .updateTable('webhook.subscriptions')
      .set(columns)
      .where('id', '=', row.id)
      .where('endpoint', '=', row.endpoint)
      .where('endpoint_encrypted', 'is', null)
      .executeTakeFirst();
    encrypted += Number(numUpdatedRows);
  }
  return encrypted;
}
