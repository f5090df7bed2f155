import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { FastifyPluginAsync } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Db } from '../../db/database.ts';
import { notFound } from '../../fhir/outcome.ts';
import { findSubscription, listSubscriptions, queuedWork, recentAttempts, subscribedTo, type SubscriptionSummary } from '../../operations/delivery-overview.ts';
import { channelOf } from '../../channels/registry.ts';
import { payloadContents } from '../../db/schema.ts';
import { callerOf } from '../authentication.ts';
import { commonRefusals, operationOutcome } from '../schemas.ts';
import { deliveryKinds } from '../../db/schema.ts';

export type ConsoleDataOptions = { db: Db };

/** Dates as JSON writes them: ISO 8601 strings. */
const summaryJson = (subscription: SubscriptionSummary) => ({
  ...subscription,
  createdAt: subscription.createdAt.toISOString(),
  lastSuccessAt: subscription.lastSuccessAt?.toISOString() ?? null,
  reactivationHeldUntil: subscription.reactivationHeldUntil?.toISOString() ?? null,
  subscribedTo: subscribedTo(subscription),
});

/** The page and its two files, read once: plain HTML, CSS and a script, no build step. */
const page = Object.fromEntries(
  (['index.html', 'console.css', 'console.js'] as const).map((file) => [file, readFileSync(path.join(import.meta.dirname, '..', 'console', file), 'utf8')]),
) as Record<'index.html' | 'console.css' | 'console.js', string>;

/** The page runs only its own script and style, talks only to this origin, and is never framed. */
const contentSecurityPolicy =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

const subscriptionSummary = z.object({
  id: z.string(),
  status: z.enum(['requested', 'active', 'error', 'off']),
  criteria: z.string(),
  endpoint: z.string().describe('Credentials masked'),
  failureCount: z.number().describe('Events refused for good in a row'),
  failedCallsSinceSuccess: z.number().describe('Calls that failed since the last one delivered, retries included'),
  lastSuccessAt: z.string().nullable().describe('The last call delivered (ISO 8601, UTC), or null'),
  error: z.string().nullable(),
  deactivationsLastDay: z.number().describe('Times it went to error in the last 24 hours: more than one is a flapping subscriber'),
  deactivationsInARow: z.number().describe('Deactivations since it last delivered a notification (failed reactivation handshakes do not count)'),
  reactivationHeldUntil: z
    .string()
    .nullable()
    .describe(
      'In error and held back by the flapping backoff: events before this instant (ISO 8601, UTC) do not reactivate it; null otherwise (the next event may)',
    ),
  createdAt: z.string(),
  topic: z
    .object({ filters: z.array(z.string()), payloadContent: z.enum(payloadContents), lastEventNumber: z.number() })
    .nullable()
    .describe('A topic-based subscription: its filters, payload level and latest event number'),
  subscribedTo: z.string().describe('Its criteria, or its topic with filters and payload level, in one line'),
});
const attempt = z.object({
  id: z.string().describe("The call's id (webhook.delivery_attempts.id: what $resend's attempt takes)"),
  subscriptionId: z.string(),
  startedAt: z.string(),
  kind: z.enum(deliveryKinds),
  eventNumber: z.number().nullable().describe("A notification's event number (what $resend's eventNumber takes); null for other calls"),
  resource: z.string().nullable(),
  attempt: z.number(),
  outcome: z.enum(['delivered', 'retrying', 'failed']),
  httpStatus: z.number().nullable(),
  durationMs: z.number(),
  error: z.string().nullable(),
  responseExcerpt: z.string().nullable().describe("The start of the subscriber's answer (the service's secrets redacted)"),
});
const websocketClient = z.object({
  connection: z.string().describe("The client's connection id"),
  address: z.string().describe("The client's address as the API saw it (behind a proxy, the proxy's)"),
  server: z.string().describe('The API process that holds it (webhook.worker_pools)'),
  boundAt: z.string(),
});
const queued = z.object({
  task: z.string(),
  items: z.number(),
  waiting: z.number(),
  scheduled: z.number(),
  running: z.number(),
  waitingSince: z.string().nullable(),
  nextRunAt: z.string().nullable(),
});

/**
 * The delivery console (`/console`): a read-only page of the subscriptions,
 * their recent calls and what is queued, refreshed every second. The page
 * and its files hold no data and need no key; the data comes from
 * /console/api, behind the API key like the FHIR routes (read scope; a key
 * without admin sees its own subscriptions), and holds no secret: endpoints
 * are masked and headers are not shown.
 */
export const consolePage: FastifyPluginAsync = async (app) => {
  const file = (url: string, name: keyof typeof page, type: string) =>
    app.get(url, { schema: { hide: true } }, async (_request, reply) =>
      reply.type(type).header('content-security-policy', contentSecurityPolicy).send(page[name]),
    );
  file('/console', 'index.html', 'text/html; charset=utf-8');
  file('/console/console.css', 'console.css', 'text/css; charset=utf-8');
  file('/console/console.js', 'console.js', 'text/javascript; charset=utf-8');
};

/**
 * The clients connected to the service for a subscription, oldest first (a websocket one's, bound to it);
 * null for a channel whose receivers are at an endpoint.
 */
async function connectedClients(db: Db, id: string): Promise<z.infer<typeof websocketClient>[] | null> {
  const subscription = await db.selectFrom('webhook.subscriptions').select('channel_type').where('id', '=', id).executeTakeFirstOrThrow();
  const { receivers } = channelOf(subscription.channel_type);
  return receivers.at === 'service' ? receivers.connected(db, id) : null;
}

/** The console's data, at /console/api; app.ts puts it behind the API key and the per-key limit. */
export const consoleData: FastifyPluginAsyncZod<ConsoleDataOptions> = async (api, { db }) => {
  api.get(
    '/subscriptions',
    {
      schema: {
        summary: "The console's subscriptions: status, criteria, endpoint (masked), failures, reason",
        tags: ['Console'],
        operationId: 'consoleSubscriptions',
        response: { 200: z.array(subscriptionSummary), ...commonRefusals },
      },
    },
    async (request) => (await listSubscriptions(db, { caller: callerOf(request) })).map(summaryJson),
  );
  api.get(
    '/subscriptions/:id',
    {
      schema: {
        summary: 'One subscription for the console: its last 50 calls and what is queued',
        tags: ['Console'],
        operationId: 'consoleSubscription',
        params: z.object({ id: z.string() }),
        response: {
          200: z.object({
            subscription: subscriptionSummary,
            attempts: z.array(attempt),
            queued: z.array(queued),
            websocketClients: z
              .array(websocketClient)
              .nullable()
              .describe('A websocket subscription: the clients bound to it now, whichever API process holds them; null for a rest-hook one'),
          }),
          ...commonRefusals,
          404: operationOutcome,
        },
      },
    },
    async (request) => {
      const { id } = request.params;
      const subscription = z.uuid().safeParse(id).success ? await findSubscription(db, id, callerOf(request)) : undefined;
      if (subscription === undefined) throw notFound(`Subscription/${id} is not known`);
      const attempts = (await recentAttempts(db, id, 50)).map((call) => ({ ...call, startedAt: call.startedAt.toISOString() }));
      const work = (await queuedWork(db, id)).map((item) => ({
        ...item,
        waitingSince: item.waitingSince?.toISOString() ?? null,
        nextRunAt: item.nextRunAt?.toISOString() ?? null,
      }));
      return { subscription: summaryJson(subscription), attempts, queued: work, websocketClients: await connectedClients(db, id) };
    },
  );
};
