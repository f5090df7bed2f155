import type { ColumnType, Generated } from 'kysely';

/** A FHIR resource as JSON. */
export type FhirResource = { resourceType: string; id?: string; meta?: Record<string, unknown> } & Record<string, unknown>;

/** Columns the database fills in by default or by trigger. */
type AssignedByDatabase<T> = ColumnType<T, T | undefined, never>;

export interface ResourcesTable {
  resource_type: string;
  id: string;
  version_id: AssignedByDatabase<number>;
  last_updated: AssignedByDatabase<Date>;
  content: ColumnType<FhirResource, FhirResource | string, FhirResource | string>;
}

export interface ResourceHistoryTable {
  resource_type: string;
  id: string;
  version_id: number;
  last_updated: Date;
  is_deletion: boolean;
  content: FhirResource;
}

export interface ApiKeysTable {
  id: Generated<string>;
  name: string;
  key_sha256: string;
  created_at: Generated<Date>;
  revoked_at: Date | null;
  scopes: Generated<ApiKeyScope[]>;
}

/** What a key may do (migration 0013): read, write, and admin (every subscription, not only its own). */
export type ApiKeyScope = 'read' | 'write' | 'admin';

/** A subscription's states (the machine: src/subscriptions/state.ts). */
/** Whether `text` could be an id of a row (a UUID): any other text names none, and is not sent to a uuid column. */
export function isUuid(text: string): boolean {
  return /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(text);
}

export const subscriptionStatuses = ['requested', 'active', 'error', 'off'] as const;
export type SubscriptionStatus = (typeof subscriptionStatuses)[number];

/** How a subscription's notifications leave the service (src/channels/channel.ts): its channel_type. */
export const channelTypes = ['rest-hook', 'websocket', 'nats-jetstream', 'rabbitmq'] as const;
export type ChannelType = (typeof channelTypes)[number];

/** A topic-based subscription's payload level (the Backport IG's backport-payload-content): its payload_content. */
export const payloadContents = ['empty', 'id-only', 'full-resource'] as const;
export type PayloadContent = (typeof payloadContents)[number];

export interface SubscriptionsTable {
  id: Generated<string>;
  identifier: Generated<string>;
  status: SubscriptionStatus;
  criteria: string;
  /** The criteria's resource type; null for a subscription on a topic (topic_id). */
  resource_type: string | null;
  /** A CompiledCriteria (src/search/criteria.ts); written as JSON text. */
  compiled_criteria: ColumnType<unknown, string, string>;
  match: string | null;
  match_deleted: string | null;
  /** The API key that created it; null before migration 0013. */
  created_by_api_key: string | null;
  /** RelatedCondition[] (src/search/jsonpath.ts) as JSON text, or null. */
  related_match: ColumnType<unknown, string | null, string | null>;
  /** As shown (credentials masked) when endpoint_encrypted holds the whole endpoint (migration 0015). */
  endpoint: string;
  endpoint_encrypted: Buffer | null;
  payload: string | null;
  headers_encrypted: Buffer;
  signing_secret_encrypted: Buffer;
  secret_is_generated: boolean;
  /** The secret before the last rotation, which signs calls too until previous_secret_until (migration 0029); null: none. */
  previous_signing_secret_encrypted: Buffer | null;
  previous_secret_until: Date | null;
  reason: string;
  contact_emails: string[];
  error: string | null;
  ended_at: Date | null;
  failure_count: Generated<number>;
  version_id: Generated<number>;
  last_updated: Generated<Date>;
  created_at: Generated<Date>;
  /** A topic-based subscription's topic (webhook.subscription_topics.id), its filters and channel settings (migrations 0019, 0020); null on a classic one. */
  topic_id: string | null;
  /** CompiledFilters (src/topics/compile.ts) as JSON text. */
  topic_filter: ColumnType<unknown, string | null, string | null>;
  filter_criteria: string[] | null;
  payload_content: PayloadContent | null;
  heartbeat_period_seconds: number | null;
  timeout_seconds: number | null;
  max_count: number | null;
  /** Calls a second at most (migration 0021); numeric, read as text. */
  max_calls_per_second: ColumnType<string | null, number | null, number | null>;
  /** Calls in flight at once at most, within DELIVERY_PARALLEL_CALLS (migration 0024); null: 1 on a topic, else DELIVERY_PARALLEL_CALLS. */
  parallel_calls: number | null;
  /** The subscription's retry policy (migration 0038); null: DELIVERY_MAX_FAILURES and DELIVERY_RETRY_DELAYS_MS. */
  max_attempts: number | null;
  retry_first_delay_ms: number | null;
  /** numeric, read as text. */
  retry_delay_growth: ColumnType<string | null, number | null, number | null>;
  retry_max_delay_ms: number | null;
  deactivations_in_a_row: Generated<number>;
  reactivation_not_before: Date | null;
  /** A reactivation handshake is in flight until then at most (migration 0033); null: none. */
  reactivation_claimed_until: Date | null;
  /** rest-hook, or websocket (topic-based only; endpoint is then the websocket URL its clients connect to): migration 0030. */
  channel_type: Generated<ChannelType>;
}

/** What a call to a subscriber was (webhook.delivery_attempts.kind). */
export const deliveryKinds = ['handshake', 'notification', 'heartbeat'] as const;
export type DeliveryKind = (typeof deliveryKinds)[number];

export interface DeliveryAttemptsTable {
  id: Generated<string>;
  subscription_id: string;
  kind: DeliveryKind;
  resource_type: string | null;
  resource_id: string | null;
  version_id: number | null;
  /** The subscription's number of the event a notification sent (migration 0018). */
  event_number: number | null;
  attempt: number;
  started_at: Date;
  duration_ms: number;
  http_status: number | null;
  outcome: 'delivered' | 'retrying' | 'failed';
  error: string | null;
  response_excerpt: string | null;
}

export interface DeactivationAlertsTable {
  id: Generated<string>;
  subscription_id: string;
  recipients: string[];
  reason: string;
  created_at: Generated<Date>;
  /** NULL until told; folded: told in the e-mail of row told_in (migration 0028). */
  handled_as: 'sent' | 'logged' | 'folded' | null;
  handled_at: Date | null;
  /** For a row whose e-mail went out: the deactivations it told of, this one included. */
  deactivations_told: number | null;
  told_in: string | null;
}

/** A rotation of a subscription's signing secret (migration 0029): who, when, until when the previous one signed too; never a secret. */
export interface SecretRotationsTable {
  id: Generated<string>;
  subscription_id: string;
  rotated_at: Date;
  /** The API key of a rotation through the API; null for an operator's (rotated_by_operator). */
  rotated_by_api_key: string | null;
  /** The operating-system user who ran the CLI command; null for a rotation through the API. */
  rotated_by_operator: string | null;
  previous_secret_until: Date;
}

/** What became of an operator's `subscriptions reactivate`, carried out by a worker (migration 0033). */
export type ReactivationRequestOutcome = 'reactivated' | 'active meanwhile' | 'not reactivated';

export interface ReactivationRequestsTable {
  id: string;
  subscription_id: string;
  /** The operating-system user who ran the CLI command. */
  requested_by: string;
  requested_at: Generated<Date>;
  /** Null until a worker answered. */
  outcome: ReactivationRequestOutcome | null;
  http_status: number | null;
  /** Why it was not reactivated. */
  detail: string | null;
  answered_at: Date | null;
}

/** What became of an event (migration 0018). */
export type SubscriptionEventStatus = 'pending' | 'delivered' | 'failed' | 'superseded' | 'abandoned' | 'gone';

export interface SubscriptionEventsTable {
  id: Generated<string>;
  subscription_id: string;
  resource_type: string;
  resource_id: string;
  version_id: number;
  deleted: boolean;
  written_at: Generated<Date>;
  event_number: ColumnType<string | null, never, number | null>;
  attempts: Generated<number>;
  not_before: Date | null;
  status: Generated<SubscriptionEventStatus>;
  settled_at: Date | null;
}

export interface SubscriptionStreamsTable {
  subscription_id: string;
  last_event_number: ColumnType<string, never, never>;
  next_call_at: Date | null;
}

/** A topic for topic-based subscriptions (migration 0019); its JSON is src/topics/'s to read. */
export interface SubscriptionTopicsTable {
  id: Generated<string>;
  url: string;
  version: string | null;
  title: string | null;
  status: ColumnType<'active' | 'retired', 'active' | 'retired' | undefined, 'active' | 'retired'>;
  definition: ColumnType<unknown, string, never>;
  compiled: ColumnType<unknown, string, never>;
  added_at: Generated<Date>;
  retired_at: Date | null;
}

/** A $get-ws-binding-token token (migration 0030): its SHA-256, for one bind before it expires. */
export interface WebsocketBindingTokensTable {
  token_sha256: string;
  api_key_id: string;
  subscription_ids: string[];
  created_at: Generated<Date>;
  expires_at: Date;
  used_at: Date | null;
}

/** A websocket client bound to a subscription, held by the API process server_id (migration 0030). */
export interface WebsocketBindingsTable {
  subscription_id: string;
  connection_id: string;
  server_id: string;
  api_key_id: string;
  client_address: string;
  bound_at: Generated<Date>;
}

/** A websocket notification on its way to the API processes holding the clients (migration 0030). */
export interface WebsocketNotificationsTable {
  id: Generated<string>;
  subscription_id: string;
  notification_type: 'handshake' | 'heartbeat' | 'event-notification';
  /** bigint, read as text; null for a handshake or heartbeat. */
  last_event_number: ColumnType<string | null, number | null, never>;
  body: string;
  published_at: Generated<Date>;
}

/** The tables the service reads and writes, for Kysely. */
export interface Database {
  'fhir.resources': ResourcesTable;
  'fhir.resource_history': ResourceHistoryTable;
  'webhook.api_keys': ApiKeysTable;
  'webhook.subscriptions': SubscriptionsTable;
  'webhook.delivery_attempts': DeliveryAttemptsTable;
  'webhook.subscription_events': SubscriptionEventsTable;
  'webhook.subscription_streams': SubscriptionStreamsTable;
  'webhook.deactivation_alerts': DeactivationAlertsTable;
  'webhook.secret_rotations': SecretRotationsTable;
  'webhook.reactivation_requests': ReactivationRequestsTable;
  'webhook.subscription_topics': SubscriptionTopicsTable;
  'webhook.websocket_binding_tokens': WebsocketBindingTokensTable;
  'webhook.websocket_bindings': WebsocketBindingsTable;
  'webhook.websocket_notifications': WebsocketNotificationsTable;
}
