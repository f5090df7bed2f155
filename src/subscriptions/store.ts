import { randomBytes } from 'node:crypto';
import { sql, type Selectable } from 'kysely';
import pg from 'pg';
import { inTransaction, type Db } from '../db/database.ts';
import { enqueueJob } from '../db/jobs.ts';
import { criteriaDigest } from '../db/sql/criteria-digest.ts';
import { visibleTo, type Caller } from '../auth/api-keys.ts';
import { channelOf, channelTypeElement, channelTypeSystem, registeredChannels } from '../channels/registry.ts';
import { isUuid, subscriptionStatuses, type ChannelType, type FhirResource, type SubscriptionStatus, type SubscriptionsTable } from '../db/schema.ts';
import { splitQuery } from '../search/query.ts';
import { endpointColumns, storedEndpoint, wholeEndpoint } from './endpoints.ts';
import {
  maxCallsPerSecondExtension,
  parallelCallsExtension,
  parseSubscriptionRequest,
  type RequestLimits,
  type SubscriptionRequest,
  type TopicCriteria,
} from './requests.ts';
import type { SecretBox } from './secrets.ts';
import { FhirError, notFound, refusal } from '../fhir/outcome.ts';
import type { CompiledCriteria } from '../search/criteria.ts';
import { backport } from '../topics/backport.ts';
import { compileFilterCriteria, type CompiledFilters } from '../topics/compile.ts';
import { canonicalOf, findTopic } from '../topics/store.ts';
import { retryPolicyExtensions, retryPolicyOf } from './retry-policy.ts';

/** What rendering and storing a subscription needs besides the database. */
export type SubscriptionContext = {
  box: SecretBox;
  /** Public base URL, without a trailing slash. */
  baseUrl: string;
  /** Last path segment of the identifier tag's system. */
  namingSystem: string;
} & RequestLimits;

export const subscriptionsAreImmutable =
  'Subscriptions cannot be updated or deleted: switch it off (POST with status off and the same criteria) and create a new one';

type Row = Selectable<SubscriptionsTable> & { last_updated_text: string; ended_at_text: string | null; created_at_text: string };

/**
 * POST /Subscription: creates a subscription (status requested) and enqueues
 * its handshake in the same transaction, or switches off the live one with
 * the same criteria (status off). `created` tells which. A websocket
 * subscription has no endpoint to shake hands with: it is active at once, and
 * each client that binds to it gets its handshake then (src/channels/websocket/channel.ts).
 */
export async function submitSubscription(
  db: Db,
  context: SubscriptionContext,
  body: unknown,
  caller: Caller,
): Promise<{ created: boolean; resource: FhirResource }> {
  const request = parseSubscriptionRequest(body, context);
  if (request.status === 'off') return { created: false, resource: render(await switchOff(db, request, caller), context, 'stored') };
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
 * `criteria` (the exact criteria string), `url` (the exact endpoint),
 * `status` and `custom-channel` (the Backport IG's search by a custom
 * channel's type: `[system|]code`), in creation order, keyset-paged.
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
        query = query.where(sameCriteria(value));
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
      case 'custom-channel': {
        const types = customChannelTypes(value, context.baseUrl);
        // A token that names no custom channel matches nothing.
        if (types.length === 0) return { resources: [] };
        query = query.where('channel_type', 'in', types);
        break;
      }
      default:
        throw refusal(`Unknown search parameter '${name}' for Subscription (supported: _count, _page_token, _tag, criteria, url, status, custom-channel)`);
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
  // Receivers that connect to the service have no endpoint to shake hands with: active at once, each gets its handshake as it connects.
  const handshake = channelOf(request.channelType).receivers.at === 'endpoint';
  const { id } = await db
    .insertInto('webhook.subscriptions')
    .values({
      status: handshake ? 'requested' : 'active',
      criteria: request.criteria,
      ...(request.kind === 'criteria' ? criteriaColumns(request.compiled) : await topicColumns(db, request.criteria, request)),
      channel_type: request.channelType,
      ...endpointColumns(request.endpoint, context.box),
      payload: request.payload ?? null,
      headers_encrypted: context.box.seal(JSON.stringify(request.headers)),
      signing_secret_encrypted: context.box.seal(signingSecret),
      secret_is_generated: request.clientSecret === undefined,
      reason: request.reason,
      contact_emails: request.contactEmails,
      max_calls_per_second: request.maxCallsPerSecond ?? null,
      parallel_calls: request.parallelCalls ?? null,
      max_attempts: request.retryPolicy.maxAttempts ?? null,
      retry_first_delay_ms: request.retryPolicy.backoff?.firstDelayMs ?? null,
      retry_delay_growth: request.retryPolicy.backoff?.growth ?? null,
      retry_max_delay_ms: request.retryPolicy.backoff?.maxDelayMs ?? null,
      error: null,
      ended_at: null,
      created_by_api_key: caller.apiKeyId,
    })
    .returning('id')
    .executeTakeFirstOrThrow()
    .catch((error: unknown) => {
      // The rule is per key (migration 0032): the subscription in the way is the caller's own, never another client's.
      if (error instanceof pg.DatabaseError && error.constraint === 'subscriptions_one_live_per_key_and_criteria') {
        const what = request.kind === 'topic' ? `topic ${request.criteria} with ${filtersText(request.filterCriteria)}` : `criteria=${request.criteria}`;
        throw refusal(
          `This API key already has a live (requested or active) subscription for ${what} (constraint subscriptions_one_live_per_key_and_criteria): switch it off first`,
        );
      }
      throw error;
    });
  // In the creating transaction: the handshake is enqueued if and only if the subscription commits.
  if (handshake) await enqueueJob(db, 'subscription_handshake', { subscriptionId: id }, { jobKey: `handshake:${id}` });
  return selectRows(db).where('id', '=', id).executeTakeFirstOrThrow();
}

function criteriaColumns(compiled: CompiledCriteria) {
  return {
    resource_type: compiled.resourceType,
    compiled_criteria: JSON.stringify(compiled),
    match: compiled.match,
    match_deleted: compiled.matchDeleted,
    related_match: compiled.relatedMatch === null ? null : JSON.stringify(compiled.relatedMatch),
  };
}

/**
 * A topic-based subscription's columns: its topic, which must be known and
 * active, and its filters, each one the topic offers, compiled.
 */
async function topicColumns(db: Db, canonical: string, request: TopicCriteria) {
  const topic = await findTopic(db, canonical);
  if (topic === undefined) throw refusal(`criteria=${canonical} is not a topic this service offers (GET /fhir/resources/metadata lists them)`);
  if (topic.status === 'retired')
    throw refusal(`criteria=${canonical}: the topic ${canonicalOf(topic.url, topic.version)} is retired and takes no new subscriptions`);
  let filters: CompiledFilters;
  try {
    filters = compileFilterCriteria(topic.compiled, request.filterCriteria);
  } catch (error) {
    if (error instanceof FhirError) throw refusal(`_criteria: ${error.message}`);
    throw error;
  }
  return {
    resource_type: null,
    compiled_criteria: '{}',
    match: null,
    match_deleted: null,
    related_match: null,
    topic_id: topic.id,
    topic_filter: JSON.stringify(filters),
    filter_criteria: request.filterCriteria,
    payload_content: request.payloadContent,
    heartbeat_period_seconds: request.heartbeatPeriodSeconds ?? null,
    timeout_seconds: request.timeoutSeconds ?? null,
    max_count: request.maxCount ?? null,
  };
}

function filtersText(filterCriteria: string[] | null | undefined): string {
  return filterCriteria === null || filterCriteria === undefined || filterCriteria.length === 0 ? 'no filters' : `the filters ${filterCriteria.join(', ')}`;
}

/**
 * Switches a criteria off (for a topic-based subscription, the topic with the
 * same filters): every subscription of the caller's key for it that is not
 * off yet becomes off — the live one, and those in error (superseded by it or
 * not), so that nothing is called for this criteria again. The answer is the
 * live one, else the latest in error. (The spec leaves switching off a
 * subscription in error open; a client expects it to end rather than be
 * reactivated later.) Another key's subscriptions are never ended this way,
 * not even by an admin key: a criteria names a client's own subscription, as
 * creating one does (migration 0032); an operator ends any one by its id
 * (switchOffById, the CLI's subscriptions switch-off).
 */
async function switchOff(db: Db, { criteria, filterCriteria }: Extract<SubscriptionRequest, { status: 'off' }>, caller: Caller): Promise<Row> {
  const ending = await db
    .selectFrom('webhook.subscriptions')
    .select(['id', 'status'])
    .where('created_by_api_key', '=', caller.apiKeyId)
    .where(sameCriteria(criteria))
    .where(sql<boolean>`filter_criteria IS NOT DISTINCT FROM ${filterCriteria ?? null}::text[]`)
    .where('status', '!=', 'off')
    .orderBy('created_at', 'desc')
    .execute();
  const shown = ending.find((row) => row.status === 'requested' || row.status === 'active') ?? ending[0];
  if (!shown) {
    throw refusal(
      `Not found webhook active or requested for criteria=${criteria}${filterCriteria === undefined ? '' : ` with ${filtersText(filterCriteria)}`}`,
    );
  }
  await db
    .updateTable('webhook.subscriptions')
    .set({ status: 'off', ended_at: sql<Date>`clock_timestamp()` })
    .where(
      'id',
      'in',
      ending.map((row) => row.id),
    )
    .where('status', '!=', 'off')
    .execute();
  return selectRows(db).where('id', '=', shown.id).executeTakeFirstOrThrow();
}

/**
 * Switches Subscription/`id` off, whoever created it: an operator's action
 * (the CLI), for a client's subscription that must end. Returns the status it
 * had, or undefined when no subscription has that id; one already off is left
 * as it was.
 */
export async function switchOffById(db: Db, id: string): Promise<SubscriptionStatus | undefined> {
  const found = isUuid(id) ? await db.selectFrom('webhook.subscriptions').select('status').where('id', '=', id).executeTakeFirst() : undefined;
  if (found === undefined || found.status === 'off') return found?.status;
  await db
    .updateTable('webhook.subscriptions')
    .set({ status: 'off', ended_at: sql<Date>`clock_timestamp()` })
    .where('id', '=', id)
    .where('status', '!=', 'off')
    .execute();
  return found.status;
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
  const onTopic = row.payload_content !== null;
  const channelExtensions = [
    ...(row.max_calls_per_second === null ? [] : [{ url: maxCallsPerSecondExtension(context.baseUrl), valueDecimal: Number(row.max_calls_per_second) }]),
    ...(row.parallel_calls === null ? [] : [{ url: parallelCallsExtension(context.baseUrl), valuePositiveInt: row.parallel_calls }]),
    ...backportChannelExtensions(row),
  ];
  const extensions = retryPolicyExtensions(retryPolicyOf(row), context.baseUrl);
  return {
    resourceType: 'Subscription',
    id: row.id,
    ...(extensions.length === 0 ? {} : { extension: extensions }),
    meta: {
      versionId: String(row.version_id),
      lastUpdated: row.last_updated_text,
      ...(onTopic ? { profile: [backport.subscriptionProfile] } : {}),
      tag: [{ system: tagSystem(context), code: row.identifier }],
    },
    status: row.status,
    ...(row.contact_emails.length === 0 ? {} : { contact: row.contact_emails.map((value) => ({ system: 'email', value })) }),
    ...(row.ended_at_text === null ? {} : { end: row.ended_at_text }),
    reason: reason === 'stored' ? '-' : reason.echoReason,
    criteria: row.criteria,
    ...(row.filter_criteria === null || row.filter_criteria.length === 0
      ? {}
      : { _criteria: { extension: row.filter_criteria.map((valueString) => ({ url: backport.filterCriteria, valueString })) } }),
    ...(row.error === null ? {} : { error: row.error }),
    channel: {
      ...(channelExtensions.length === 0 ? {} : { extension: channelExtensions }),
      ...channelTypeElement(row.channel_type, context.baseUrl),
      // A channel whose receivers connect to the service names no endpoint.
      ...(channelOf(row.channel_type).receivers.at === 'service' ? {} : { endpoint: wholeEndpoint(row, context.box) }),
      ...(row.payload === null ? {} : { payload: row.payload }),
      ...(onTopic ? { _payload: { extension: [{ url: backport.payloadContent, valueCode: row.payload_content }] } } : {}),
      ...(headers.length === 0 ? {} : { header: headers }),
    },
  };
}

/** A topic-based subscription's channel settings, as the Backport IG's extensions (none when not set). */
function backportChannelExtensions(row: Row): { url: string; [value: string]: unknown }[] {
  return [
    ...(row.heartbeat_period_seconds === null ? [] : [{ url: backport.heartbeatPeriod, valueUnsignedInt: row.heartbeat_period_seconds }]),
    ...(row.timeout_seconds === null ? [] : [{ url: backport.timeout, valueUnsignedInt: row.timeout_seconds }]),
    ...(row.max_count === null ? [] : [{ url: backport.maxCount, valuePositiveInt: row.max_count }]),
  ];
}

/** The channel types a custom-channel search asks for: each comma-separated token a custom channel's code, with the service's system or none. */
function customChannelTypes(value: string, baseUrl: string): ChannelType[] {
  return value.split(',').flatMap((token) => {
    const [system, code] = token.includes('|') ? token.split('|', 2) : [undefined, token];
    const channel = registeredChannels.find((candidate) => candidate.custom !== undefined && candidate.type === code);
    return channel !== undefined && (system === undefined || system === '' || system === channelTypeSystem(baseUrl)) ? [channel.type] : [];
  });
}

function tagSystem(context: SubscriptionContext): string {
  return `${context.baseUrl}/fhir/resources/NamingSystem/${context.namingSystem}`;
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

/** The subscriptions whose criteria is `criteria`: by digest for the index (migration 0023), then as text. */
function sameCriteria(criteria: string) {
  return sql<boolean>`${criteriaDigest(sql.ref('criteria'))} = ${criteriaDigest(sql.val(criteria))} AND criteria = ${criteria}`;
}
