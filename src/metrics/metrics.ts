import { sql } from 'kysely';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Db } from '../db/database.ts';
import { deliveryKinds, subscriptionStatuses, type DeliveryKind } from '../db/schema.ts';
import { jobPayloads } from '../db/jobs.ts';

/**
 * The service's Prometheus metrics (prom-client), one registry per process.
 * The dispatcher counts what it does as it does it; the queue and the
 * subscriptions are read from the database at each scrape, so that any
 * process serving /metrics tells the whole database's state. Names follow
 * Prometheus conventions: `fhir_webhooks_` prefix, base units, `_total` for
 * counters. docs/operators.md explains each one.
 */
export type Metrics = ReturnType<typeof createMetrics>;

export type DeliveryOutcome = 'delivered' | 'retrying' | 'failed';

/** Seconds: a call answers in milliseconds to the 15 s response budget. */
const callBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15];
/** Seconds: from a commit to its delivery, through retries (minutes) and outages. */
const latencyBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600];

/**
 * The job gauges' label values, each given a sample (0) when no job has it: an
 * alert on a series (`fhir_webhooks_oldest_waiting_job_age_seconds > 300`)
 * must see 0, not nothing, when the queue is empty. The tasks are those of the
 * job contract (src/db/jobs.ts).
 */
const jobTasks = Object.keys(jobPayloads);
const jobStates = ['waiting', 'scheduled', 'running'] as const;

/** `database`: where the queue and subscription gauges are read; without it they are left out. */
export function createMetrics(database?: Db) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const registers = [registry];

  const deliveries = new Counter({
    name: 'fhir_webhooks_deliveries_total',
    help: 'Calls to subscribers by kind (handshake, notification, heartbeat) and outcome (delivered; retrying: failed, tried again; failed: failed for good)',
    labelNames: ['kind', 'outcome'],
    registers,
  });
  const callDuration = new Histogram({
    name: 'fhir_webhooks_delivery_duration_seconds',
    help: 'Duration of a call to a subscriber, by kind, from the request to the answer read',
    labelNames: ['kind'],
    buckets: callBuckets,
    registers,
  });
  const commitToDelivery = new Histogram({
    name: 'fhir_webhooks_commit_to_delivery_seconds',
    help: "From a resource version's lastUpdated (its commit) to the subscriber's 2xx answer of the call delivering it",
    buckets: latencyBuckets,
    registers,
  });
  const retries = new Counter({
    name: 'fhir_webhooks_retries_scheduled_total',
    help: 'Events and handshakes scheduled to be tried again after a failed call, by kind',
    labelNames: ['kind'],
    registers,
  });
  const deactivations = new Counter({
    name: 'fhir_webhooks_deactivations_total',
    help: 'Active subscriptions moved to error after repeated delivery failures',
    registers,
  });
  const alertFailures = new Counter({
    name: 'fhir_webhooks_alert_email_failures_total',
    help: 'Deactivation alert e-mails the SMTP server did not take (the job is retried)',
    registers,
  });
  const tokenFailures = new Counter({
    name: 'fhir_webhooks_oauth_token_failures_total',
    help: 'Requests to the OAuth token endpoint that gave no token (the call is not made and counts as a retryable failure)',
    registers,
  });
  // The websocket channel's clients (src/channels/websocket/channel.ts), in this process: an API process holds its own.
  const websocketCounts: (() => { bound: number; unbound: number })[] = [];
  new Gauge({
    name: 'fhir_webhooks_websocket_connections',
    help: 'Websocket clients connected to this process, by state (bound: to at least one subscription; unbound: not yet, or no longer)',
    labelNames: ['state'],
    registers,
    collect() {
      const total = { bound: 0, unbound: 0 };
      for (const counts of websocketCounts) {
        const now = counts();
        total.bound += now.bound;
        total.unbound += now.unbound;
      }
      this.set({ state: 'bound' }, total.bound);
      this.set({ state: 'unbound' }, total.unbound);
    },
  });
  const websocketFrames = new Counter({
    name: 'fhir_webhooks_websocket_frames_sent_total',
    help: 'Text frames sent to websocket clients, by type (handshake, heartbeat, event-notification: notification Bundles; error: an OperationOutcome before a close)',
    labelNames: ['type'],
    registers,
  });
  const websocketCloses = new Counter({
    name: 'fhir_webhooks_websocket_closes_total',
    help: 'Websocket connections ended, by reason (client, idle, slow-client, token, malformed, too-large, key-limit, server-full, subscription-ended, shutdown)',
    labelNames: ['reason'],
    registers,
  });
  for (const type of websocketFrameTypes) websocketFrames.inc({ type }, 0);
  for (const reason of websocketCloseReasons) websocketCloses.inc({ reason }, 0);
  for (const kind of deliveryKinds) {
    retries.inc({ kind }, 0);
    for (const outcome of ['delivered', 'retrying', 'failed'] satisfies DeliveryOutcome[]) deliveries.inc({ kind, outcome }, 0);
  }

  if (database !== undefined) registerDatabaseGauges(database, registers);

  return {
    registry,
    /** A call's result as recorded in webhook.delivery_attempts. */
    called(kind: DeliveryKind, outcome: DeliveryOutcome, durationMs: number): void {
      deliveries.inc({ kind, outcome });
      callDuration.observe({ kind }, durationMs / 1000);
    },
    delivered(committedAt: Date, answeredAt: Date): void {
      commitToDelivery.observe(Math.max(0, answeredAt.getTime() - committedAt.getTime()) / 1000);
    },
    retryScheduled(kind: DeliveryKind, count = 1): void {
      retries.inc({ kind }, count);
    },
    deactivated(): void {
      deactivations.inc();
    },
    alertEmailFailed(): void {
      alertFailures.inc();
    },
    tokenRequestFailed(): void {
      tokenFailures.inc();
    },
    /** A websocket server's connection counts, read at each scrape. */
    countWebsocketConnections(counts: () => { bound: number; unbound: number }): void {
      websocketCounts.push(counts);
    },
    websocketFrameSent(type: WebsocketFrameType): void {
      websocketFrames.inc({ type });
    },
    websocketClosed(reason: WebsocketCloseReason): void {
      websocketCloses.inc({ reason });
    },
  };
}

export const websocketFrameTypes = ['handshake', 'heartbeat', 'event-notification', 'error'] as const;
export type WebsocketFrameType = (typeof websocketFrameTypes)[number];

/**
 * Why a websocket connection ended: the client closed it; idle (nothing
 * bound, or no answer to pings, for WEBSOCKET_IDLE_TIMEOUT_SECONDS);
 * slow-client (its send buffer passed WEBSOCKET_SEND_BUFFER_BYTES); token
 * (an unknown, used or expired token, or one whose key or subscriptions no
 * longer allow the bind); malformed (not a bind-with-token message);
 * too-large (a message over WEBSOCKET_MAX_MESSAGE_BYTES); key-limit
 * (WEBSOCKET_MAX_CONNECTIONS_PER_KEY); server-full (WEBSOCKET_MAX_CONNECTIONS);
 * subscription-ended (its subscriptions were switched off, or its key revoked);
 * shutdown (the process stopped).
 */
export const websocketCloseReasons = [
  'client',
  'idle',
  'slow-client',
  'token',
  'malformed',
  'too-large',
  'key-limit',
  'server-full',
  'subscription-ended',
  'shutdown',
] as const;
export type WebsocketCloseReason = (typeof websocketCloseReasons)[number];

/**
 * Gauges read at each scrape: the subscription events by state (waiting: due,
 * its subscription not being sent; sending: its subscription claimed by a
 * worker; scheduled: a retry, due later), the age of the oldest waiting
 * event, graphile-worker's jobs by task and state (its public jobs view), the
 * age of the oldest waiting job by task, the subscriptions by status, and of
 * the deactivations of the last day the flapping subscriptions and the most of
 * one subscription.
 */
function registerDatabaseGauges(db: Db, registers: Registry[]): void {
  new Gauge({
    name: 'fhir_webhooks_events',
    help: 'Subscription events not yet settled, by state (waiting: due, its subscription not being sent; sending: its subscription claimed by a worker; scheduled: a retry, due later)',
    labelNames: ['state'],
    registers,
    async collect() {
      const { rows } = await sql<{ state: string; events: number }>`
        SELECT CASE WHEN EXISTS (SELECT FROM webhook.subscription_claims claim WHERE claim.subscription_id = pending.subscription_id) THEN 'sending'
                    WHEN event.not_before > now() THEN 'scheduled'
                    ELSE 'waiting' END AS state,
               count(*)::int AS events
        FROM webhook.pending_events pending
        JOIN webhook.subscription_events event ON event.id = pending.event_id
        GROUP BY 1`.execute(db);
      for (const state of ['waiting', 'sending', 'scheduled']) this.set({ state }, rows.find((row) => row.state === state)?.events ?? 0);
    },
  });
  new Gauge({
    name: 'fhir_webhooks_oldest_waiting_event_age_seconds',
    help: "How long the oldest due event whose subscription no worker is sending has waited since it was written: the senders' lag (0 when none waits)",
    registers,
    async collect() {
      const { rows } = await sql<{ age: number | null }>`
        SELECT extract(epoch FROM now() - min(event.written_at))::float8 AS age
        FROM webhook.pending_events pending
        JOIN webhook.subscription_events event ON event.id = pending.event_id
        WHERE NOT EXISTS (SELECT FROM webhook.subscription_claims claim WHERE claim.subscription_id = pending.subscription_id)
          AND coalesce(event.not_before, '-infinity') <= now()`.execute(db);
      this.set(Math.max(0, rows[0]?.age ?? 0));
    },
  });
  new Gauge({
    name: 'fhir_webhooks_jobs',
    help: "graphile-worker's jobs by task and state (waiting: due, free to take; scheduled: due later, such as retries; running: taken by a worker)",
    labelNames: ['task', 'state'],
    registers,
    async collect() {
      const { rows } = await sql<{ task: string; state: string; jobs: number }>`
        SELECT task_identifier AS task,
               CASE WHEN locked_at IS NOT NULL THEN 'running' WHEN run_at > now() THEN 'scheduled' ELSE 'waiting' END AS state,
               count(*)::int AS jobs
        FROM graphile_worker.jobs
        GROUP BY 1, 2`.execute(db);
      this.reset();
      for (const task of jobTasks) for (const state of jobStates) this.set({ task, state }, 0);
      for (const row of rows) this.set({ task: row.task, state: row.state }, row.jobs);
    },
  });
  new Gauge({
    name: 'fhir_webhooks_oldest_waiting_job_age_seconds',
    help: 'How long the oldest job that is due and free to take has been due, by task (0 when none waits)',
    labelNames: ['task'],
    registers,
    async collect() {
      const { rows } = await sql<{ task: string; age: number }>`
        SELECT task_identifier AS task, extract(epoch FROM now() - min(run_at))::float8 AS age
        FROM graphile_worker.jobs
        WHERE locked_at IS NULL AND run_at <= now()
        GROUP BY 1`.execute(db);
      this.reset();
      for (const task of jobTasks) this.set({ task }, 0);
      for (const row of rows) this.set({ task: row.task }, row.age);
    },
  });
  new Gauge({
    name: 'fhir_webhooks_subscriptions',
    help: 'Subscriptions by status',
    labelNames: ['status'],
    registers,
    async collect() {
      const { rows } = await sql<{ status: string; subscriptions: number }>`
        SELECT status, count(*)::int AS subscriptions FROM webhook.subscriptions GROUP BY status`.execute(db);
      for (const status of subscriptionStatuses) this.set({ status }, rows.find((row) => row.status === status)?.subscriptions ?? 0);
    },
  });
  // Bounded series, never one per subscription: /metrics is read without a key, and a label per
  // subscription would tell any scraper which exist (and grow without bound). `subscriptions list` names them.
  new Gauge({
    name: 'fhir_webhooks_flapping_subscriptions',
    help: 'Subscriptions that went to error more than once in the last 24 hours: flapping subscribers (their handshakes pass, their notifications fail)',
    registers,
    async collect() {
      this.set((await deactivationsLastDay(db)).flapping);
    },
  });
  new Gauge({
    name: 'fhir_webhooks_subscription_deactivations_last_day_max',
    help: 'The most times one subscription went to error in the last 24 hours (0 when none did)',
    registers,
    async collect() {
      this.set((await deactivationsLastDay(db)).most);
    },
  });
  new Gauge({
    name: 'fhir_webhooks_topic_subscriptions',
    help: 'Topic-based subscriptions by topic (its canonical, url|version) and status',
    labelNames: ['topic', 'status'],
    registers,
    async collect() {
      const { rows } = await sql<{ topic: string; status: string; subscriptions: number }>`
        SELECT topic_url || coalesce('|' || topic_version, '') AS topic, status::text, count(*)::int AS subscriptions
        FROM webhook.topic_subscriptions GROUP BY 1, 2`.execute(db);
      this.reset();
      for (const row of rows) this.set({ topic: row.topic, status: row.status }, row.subscriptions);
    },
  });
}

/** Of the last 24 hours' deactivations: the subscriptions with more than one, and the most of any one. */
async function deactivationsLastDay(db: Db): Promise<{ flapping: number; most: number }> {
  const { rows } = await sql<{ flapping: number; most: number }>`
    SELECT count(*) FILTER (WHERE deactivations > 1)::int AS flapping, coalesce(max(deactivations), 0)::int AS most
    FROM (SELECT count(*) AS deactivations
          FROM webhook.deactivation_alerts
          WHERE created_at > now() - interval '24 hours'
          GROUP BY subscription_id) AS per_subscription`.execute(db);
  return rows[0]!;
}
