import { randomUUID } from 'node:crypto';
import type { FastifyError, FastifyPluginAsync, FastifyRequest, FastifySchema, RouteHandlerMethod } from 'fastify';
import type { Db } from '../../../db/database.ts';
import { formatInstant } from '../../../fhir/instant.ts';
import { FhirError } from '../../../fhir/outcome.ts';
import { formatParameters, parametersAsInput, type OperationInput } from '../../../fhir/parameters.ts';
import { splitQuery } from '../../../search/query.ts';
import {
  readSubscription,
  searchSubscriptions,
  submitSubscription,
  subscriptionsAreImmutable,
  type SubscriptionContext,
} from '../../../subscriptions/store.ts';
import { asRefusal } from '../../../subscriptions/requests.ts';
import { maxEventsPerAnswer, subscriptionEvents, subscriptionStatus } from '../../../subscriptions/topic-status.ts';
import { callerOf } from '../../authentication.ts';
import { z } from 'zod';
import { errorOutcome, fhirJson, sendOutcome } from '../../errors.ts';
import { bundle, commonRefusals, fhirOperation, operationOutcome, resource, subscription, subscriptionReadEnvelope } from '../../schemas.ts';
import { nothingToResend, resendEvents, type ResendOutcome, type ResendSelection } from '../../../subscriptions/resend.ts';
import { refusal } from '../../../subscriptions/requests.ts';
import { reactivateOnRequest } from '../../../subscriptions/reactivation.ts';
import { issueBindingToken, maxSubscriptionsPerToken } from '../../../subscriptions/binding-tokens.ts';
import { checkedOverlapSeconds, checkedSecret, rotateSigningSecret, type RotationRequest } from '../../../subscriptions/rotation.ts';
import type { CallContext } from '../../../dispatch/delivery.ts';
import { linkWithPageToken, pairsWithoutPageToken, rawQueryOf } from '../../raw-query.ts';

export type SubscriptionRoutesOptions = {
  db: Db;
  serviceBase: string;
  context: SubscriptionContext;
  /** How $reactivate calls the subscriber (src/subscriptions/reactivation.ts). */
  calls: CallContext;
  /** How long a $get-ws-binding-token token may be used (WEBSOCKET_BINDING_TOKEN_SECONDS). */
  bindingTokenSeconds: number;
};

/** The Subscription endpoints of the spec: create or switch off, search, read; no update. */
export const subscriptionRoutes: FastifyPluginAsync<SubscriptionRoutesOptions> = async (app, { db, serviceBase, context, calls, bindingTokenSeconds }) => {
  // The spec gives these endpoints their own refusal format: every 400 (malformed JSON included) uses it.
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const { status, outcome } = errorOutcome(error, request);
    return sendOutcome(reply, status, status === 400 ? asRefusal(outcome) : outcome);
  });

  app.post(
    '/Subscription',
    {
      schema: {
        summary: 'Create a subscription (status requested) or switch one off (status off)',
        description:
          "A new subscription is requested: the service calls its endpoint (the handshake) and makes it active on a 2xx. A topic-based subscription with channel.type websocket has no endpoint: it is active at once, and its clients bind with $get-ws-binding-token. Status off switches off every subscription with the criteria. Refusals use the spec's format.",
        ...fhirOperation('Subscriptions', 'submitSubscription', true),
        body: subscription,
        response: {
          201: subscription.describe('Created, status requested (active for a websocket subscription); the reason echoed, a generated secret never shown'),
          200: subscription.describe('Switched off'),
          ...commonRefusals,
          400: operationOutcome.describe("Refused, in the spec's format: the reason names the field"),
        },
      },
      // parseSubscriptionRequest checks the body (zod), with the spec's refusal texts: the schema above only describes it.
      validatorCompiler: () => (data: unknown) => ({ value: data }),
    },
    async (request, reply) => {
      const { created, resource } = await submitSubscription(db, context, request.body, callerOf(request));
      request.log.info({ subscriptionId: resource.id }, created ? `subscription created (${String(resource.status)})` : 'subscription switched off');
      return reply.code(created ? 201 : 200).type(fhirJson).header('location', `${serviceBase}/Subscription/${resource.id}`).send(resource);
    },
  );

  app.get(
    '/Subscription',
    {
      schema: {
        summary: "Search subscriptions (a key without the admin scope sees its own)",
        ...fhirOperation('Subscriptions', 'searchSubscriptions'),
        querystring: z.looseObject({
          criteria: z.string().optional().describe('The exact criteria string'),
          url: z.string().optional().describe('The exact endpoint'),
          status: z.string().optional().describe('requested, active, error or off, comma-separated'),
          _tag: z.string().optional().describe('<system>|<identifier>: the subscription with this identifier'),
          _count: z.string().optional().describe('Page size, 1-1000 (default 20)'),
          _page_token: z.string().optional().describe("The next link's token"),
        }),
        response: { 200: bundle.describe('A searchset Bundle of Subscriptions'), ...commonRefusals },
      },
    },
    async (request, reply) => {
      const rawQuery = rawQueryOf(request.url);
      const page = await searchSubscriptions(db, context, rawQuery, callerOf(request));
      const searchUrl = `${serviceBase}/Subscription`;
      return reply.type(fhirJson).send({
        resourceType: 'Bundle',
        id: randomUUID(),
        type: 'searchset',
        // The spec's shape, kept where FHIR JSON would leave them out: link present even empty, entry the array of matches even when none.
        link: page.nextPageToken === undefined ? [] : [{ relation: 'next', url: linkWithPageToken(searchUrl, pairsWithoutPageToken(rawQuery), page.nextPageToken) }],
        entry: page.resources.map((resource) => ({ fullUrl: `${searchUrl}/${resource.id}`, resource, search: { mode: 'match' } })),
      });
    },
  );

  app.get<{ Params: { id: string } }>(
    '/Subscription/:id',
    {
      schema: {
        summary: 'Read a subscription',
        ...fhirOperation('Subscriptions', 'readSubscription'),
        params: z.object({ id: z.string().describe("The subscription's id") }),
        response: { 200: subscriptionReadEnvelope, ...commonRefusals, 404: operationOutcome.describe('Not known (or created by another key, to a key without admin)') },
      },
    },
    async (request, reply) => {
      const resource = await readSubscription(db, context, request.params.id, callerOf(request));
      // The spec's read envelope: neither a Bundle nor a bare resource.
      return reply.type(fhirJson).send({ fullUrl: `${serviceBase}/Subscription/${resource.id}`, resource, search: { mode: 'match' } });
    },
  );

  /** An operation's input: the URL's parameters, and those of a Parameters body when it was invoked by POST. */
  const operationInput = (request: FastifyRequest): OperationInput => [...splitQuery(rawQueryOf(request.url)), ...parametersAsInput(request.body)];
  const parametersBody = resource.nullish().describe('A Parameters resource with the same parameters as the GET form (valueString, valueCode, valueInteger, …); none at all is fine');
  /** An operation is served by GET and by POST (FHIR: every operation may be invoked by POST); only the POST has a body. */
  const byGetAndPost = (route: { url: string; schema: FastifySchema & { operationId: string }; handler: RouteHandlerMethod }) => {
    app.route({ ...route, method: 'GET' });
    app.route({ ...route, method: 'POST', schema: { ...route.schema, ...fhirOperation('Subscriptions', `${route.schema.operationId}ByPost`, true), body: parametersBody } });
  };

  byGetAndPost({
    url: '/Subscription/$status',
    schema: {
      summary: 'The status of topic-based subscriptions (Backport IG $status, type level)',
      description: 'A searchset Bundle of status Parameters (type query-status), one per topic-based subscription the key may see, narrowed by id and status. By GET, or by POST with a Parameters body.',
      ...fhirOperation('Subscriptions', 'subscriptionsStatus'),
      querystring: z.looseObject({
        id: z.string().optional().describe('Subscription ids, comma-separated or repeated'),
        status: z.string().optional().describe('requested, active, error or off, comma-separated'),
      }),
      response: { 200: bundle.describe('A searchset Bundle of backport-subscription-status-r4 Parameters'), ...commonRefusals },
    },
    handler: async (request, reply) => reply.type(fhirJson).send(await subscriptionStatus(db, context, callerOf(request), { input: operationInput(request) })),
  });

  byGetAndPost({
    url: '/Subscription/:id/$status',
    schema: {
      summary: "A topic-based subscription's status (Backport IG $status)",
      description: 'Its state, its error and events-since-subscription-start: the number of its latest event. By GET, or by POST (no parameters).',
      ...fhirOperation('Subscriptions', 'subscriptionStatus'),
      params: z.object({ id: z.string().describe("The subscription's id") }),
      response: { 200: bundle.describe('A searchset Bundle of one backport-subscription-status-r4 Parameters'), ...commonRefusals, 404: operationOutcome.describe('Not known (or created by another key)') },
    },
    handler: async (request, reply) => {
      const { id } = request.params as { id: string };
      const input = operationInput(request);
      const given = input.filter(([name]) => !formatParameters.has(name));
      if (given.length > 0) throw refusal(`$status of one subscription takes no parameters (given: ${given.map(([name]) => name).join(', ')})`);
      return reply.type(fhirJson).send(await subscriptionStatus(db, context, callerOf(request), { id }));
    },
  });

  byGetAndPost({
    url: '/Subscription/:id/$events',
    schema: {
      summary: "A topic-based subscription's events still held, by number (Backport IG $events)",
      description: `How a client that saw a gap in the event numbers gets what it missed: a history Bundle, the status (type query-event) first, then the events, at most ${maxEventsPerAnswer} per answer. Numbers no longer held are said in an OperationOutcome entry. By GET, or by POST with a Parameters body.`,
      ...fhirOperation('Subscriptions', 'subscriptionEvents'),
      params: z.object({ id: z.string().describe("The subscription's id") }),
      querystring: z.looseObject({
        eventsSinceNumber: z.string().optional().describe('The first event number (default: the oldest held)'),
        eventsUntilNumber: z.string().optional().describe('The last event number (default: the latest)'),
        content: z.enum(['empty', 'id-only', 'full-resource']).optional().describe("How much of each event (default: the subscription's payload content)"),
      }),
      response: { 200: bundle.describe('A history Bundle: backport-subscription-status-r4 Parameters, then the events'), ...commonRefusals, 404: operationOutcome.describe('Not known (or created by another key)') },
    },
    handler: async (request, reply) => {
      const { id } = request.params as { id: string };
      return reply.type(fhirJson).send(await subscriptionEvents(db, context, callerOf(request), id, operationInput(request)));
    },
  });

  app.post<{ Params: { id: string } }>(
    '/Subscription/:id/$resend',
    {
      schema: {
        summary: 'Send recorded events of a subscription again',
        description:
          'A Parameters body with one of: eventNumber (an event by its number), attempt (the event of a recorded call, by its id), failedSince (every event that failed for good since that instant). A resend is a new attempt of the same event: same number, version and webhook-id. Only to an active subscription. Answers the events queued, and those skipped with why; when failedSince matches nothing, an outcome part that says so.',
        ...fhirOperation('Subscriptions', 'resendEvents', true),
        params: z.object({ id: z.string().describe("The subscription's id") }),
        body: resendParameters,
        response: {
          200: resource.describe(
            'A Parameters: a queued part per event queued (eventNumber, resource), a skipped part per event left (with its reason); ' +
              'when no event failed for good since failedSince, only an outcome part (valueString "Nothing to resend: …"): FHIR has no empty parameter array',
          ),
          ...commonRefusals,
          400: operationOutcome.describe('Not active, or the event cannot be sent again (pending, gone, a newer version sent since)'),
          404: operationOutcome.describe('The subscription (or the event, or the call) is not known or no longer held'),
        },
      },
      // resendSelection checks the body (zod) and refuses it in the spec's format: the schema above only describes it.
      validatorCompiler: () => (data: unknown) => ({ value: data }),
    },
    async (request, reply) => {
      const outcome = await resendEvents(db, request.params.id, resendSelection(request.body), callerOf(request));
      request.log.info({ subscriptionId: request.params.id, queued: outcome.queued.length, skipped: outcome.skipped.length }, 'events resent on request');
      return reply.type(fhirJson).send(resendAnswer(outcome));
    },
  );

  /** $get-ws-binding-token's answer for the subscriptions `ids` names (none: every websocket subscription the key sees). */
  const bindingToken = async (request: FastifyRequest, ids: string[]) => {
    const token = await issueBindingToken(db, { baseUrl: context.baseUrl, caller: callerOf(request), ids, lifetimeSeconds: bindingTokenSeconds });
    // The token itself is never logged: it is a credential until used.
    request.log.info({ subscriptions: ids.length === 0 ? 'every websocket subscription of the key' : ids }, 'websocket binding token issued');
    return token;
  };
  const tokenAnswer = resource.describe('A Parameters: token (valueString, shown once), expiration (valueDateTime), subscription (valueString, one per subscription it binds), websocket-url (valueUrl)');

  byGetAndPost({
    url: '/Subscription/$get-ws-binding-token',
    schema: {
      summary: 'A token for a websocket client to bind to websocket subscriptions (Backport IG $get-ws-binding-token, type level)',
      description: `A token for the subscriptions named by id (repeated or comma-separated; without id, every websocket subscription the key sees that is not off, at most ${maxSubscriptionsPerToken}). It binds once (the websocket message bind-with-token <token>), within WEBSOCKET_BINDING_TOKEN_SECONDS, for this key only. By GET, or by POST with a Parameters body.`,
      ...fhirOperation('Subscriptions', 'getWsBindingToken'),
      querystring: z.looseObject({ id: z.string().optional().describe('Subscription ids, comma-separated or repeated') }),
      response: { 200: tokenAnswer, ...commonRefusals, 404: operationOutcome.describe('A subscription named is not known (or created by another key)') },
    },
    handler: async (request, reply) => {
      const ids: string[] = [];
      for (const [name, value] of operationInput(request)) {
        if (formatParameters.has(name)) continue;
        if (name !== 'id') throw refusal(`Unknown parameter '${name}' for $get-ws-binding-token (supported: id)`);
        ids.push(...value.split(',').filter((id) => id !== ''));
      }
      return reply.type(fhirJson).send(await bindingToken(request, ids));
    },
  });

  byGetAndPost({
    url: '/Subscription/:id/$get-ws-binding-token',
    schema: {
      summary: 'A token for a websocket client to bind to this websocket subscription (Backport IG $get-ws-binding-token)',
      description: 'A token that binds this subscription once (the websocket message bind-with-token <token>), within WEBSOCKET_BINDING_TOKEN_SECONDS, for this key only. An id parameter is ignored, as the IG says. By GET, or by POST.',
      ...fhirOperation('Subscriptions', 'getWsBindingTokenOfSubscription'),
      params: z.object({ id: z.string().describe("The subscription's id") }),
      response: { 200: tokenAnswer, ...commonRefusals, 404: operationOutcome.describe('Not known (or created by another key)') },
    },
    handler: async (request, reply) => {
      const { id } = request.params as { id: string };
      const unknown = operationInput(request).find(([name]) => !formatParameters.has(name) && name !== 'id');
      if (unknown !== undefined) throw refusal(`Unknown parameter '${unknown[0]}' for $get-ws-binding-token (supported: id, ignored at the instance level)`);
      return reply.type(fhirJson).send(await bindingToken(request, [id]));
    },
  });

  // An operation that changes state: POST only (FHIR: an operation with affectsState is not invoked by GET).
  app.post<{ Params: { id: string } }>(
    '/Subscription/:id/$reactivate',
    {
      schema: {
        summary: 'Reactivate a subscription in error now, its receiver fixed',
        description:
          "Sends the reactivation handshake now, rather than at the next matching event (the spec's path, which stays), and waits for it (up to DELIVERY_RESPONSE_TIMEOUT_MS). On 2xx the subscription is active, as an event's reactivation makes it; the events it missed in error are not sent ($events, $resend). No parameters: no body, or a Parameters without any.",
        ...fhirOperation('Subscriptions', 'reactivateSubscription', true),
        params: z.object({ id: z.string().describe("The subscription's id") }),
        body: reactivateParameters,
        response: {
          200: subscription.describe('Reactivated: the Subscription, status active'),
          ...commonRefusals,
          400: operationOutcome.describe("Parameters given, in the spec's refusal format: the operation takes none"),
          404: operationOutcome.describe('Not known (or created by another key, to a key without admin)'),
          409: operationOutcome.describe('Not in error (active, requested or off), or superseded by a newer subscription for its criteria: nothing was called'),
          502: operationOutcome.describe('The handshake failed: the subscription stays in error, with the new reason, which this says'),
        },
      },
      // The body is checked below, with the spec's refusal text: the schema above only describes it.
      validatorCompiler: () => (data: unknown) => ({ value: data }),
    },
    async (request, reply) => {
      if (!reactivateParameters.safeParse(request.body).success) {
        throw refusal('$reactivate takes no parameters: send no body, or a Parameters without any parameter');
      }
      const caller = callerOf(request);
      await reactivateOnRequest(calls, request.params.id, { caller });
      return reply.type(fhirJson).send(await readSubscription(db, context, request.params.id, caller));
    },
  );

  // Changes state, and carries a secret: POST only, its parameters in the body (a URL's query is written to access logs).
  app.post<{ Params: { id: string } }>(
    '/Subscription/:id/$rotate-secret',
    {
      schema: {
        summary: "Rotate a subscription's signing secret, with an overlap",
        description:
          'A Parameters body: secret (valueString, the new signing secret, which becomes the secret channel header) and optionally overlapSeconds ' +
          '(valueUnsignedInt, 0 to 30 days; default SECRET_ROTATION_OVERLAP_SECONDS). Until the overlap ends every call is signed with the previous secret too: ' +
          'X-Hub-Signature with the previous one, X-Hub-Signature-Next with the new one, webhook-signature with both (docs/receivers.md). ' +
          'Recorded (who, when; never the secret). The answer never holds the secret.',
        ...fhirOperation('Subscriptions', 'rotateSubscriptionSecret', true),
        params: z.object({ id: z.string().describe("The subscription's id") }),
        body: rotateSecretParameters,
        response: {
          200: resource.describe('A Parameters: subscription (valueReference), rotatedAt and previousSecretUntil (valueInstant: until then calls carry both signatures)'),
          ...commonRefusals,
          400: operationOutcome.describe("In the spec's refusal format: no secret, one HTTP cannot carry in a header, the current one, an overlap out of range, or parameters in the URL"),
          404: operationOutcome.describe('Not known (or created by another key, to a key without admin)'),
          409: operationOutcome.describe('Off, or in the overlap of its last rotation (its receiver may still hold only the oldest secret): rotate again after it ends'),
        },
      },
      // rotationRequest checks the body (zod) and refuses it in the spec's format, never naming the secret: the schema above only describes it.
      validatorCompiler: () => (data: unknown) => ({ value: data }),
    },
    async (request, reply) => {
      const inUrl = splitQuery(rawQueryOf(request.url)).filter(([name]) => !formatParameters.has(name));
      if (inUrl.length > 0) {
        throw refusal('$rotate-secret takes its parameters in a Parameters body only: a URL is written to access logs, so a secret sent in one is no secret any more');
      }
      const rotation = await rotateSigningSecret(db, context.box, request.params.id, rotationRequest(request.body, calls.delivery.secretRotationOverlapSeconds), {
        caller: callerOf(request),
      });
      request.log.info({ subscriptionId: rotation.subscriptionId, previousSecretUntil: rotation.previousSecretUntil }, 'subscription signing secret rotated');
      return reply.type(fhirJson).send({
        resourceType: 'Parameters',
        parameter: [
          { name: 'subscription', valueReference: { reference: `Subscription/${rotation.subscriptionId}` } },
          { name: 'rotatedAt', valueInstant: formatInstant(rotation.rotatedAt) },
          { name: 'previousSecretUntil', valueInstant: formatInstant(rotation.previousSecretUntil) },
        ],
      });
    },
  );

  for (const method of ['PUT', 'PATCH', 'DELETE'] as const) {
    app.route({
      method,
      url: '/Subscription/:id',
      schema: {
        summary: 'Not allowed: subscriptions cannot be updated or deleted',
        ...fhirOperation('Subscriptions', `${method.toLowerCase()}SubscriptionRefused`),
        response: { 405: operationOutcome.describe('Switch it off and create another (POST /Subscription)'), ...commonRefusals },
      },
      handler: async () => {
        throw new FhirError(405, 'not-supported', subscriptionsAreImmutable);
      },
    });
  }
};

/** What $reactivate takes: nothing (no body), or a Parameters without parameters. */
const reactivateParameters = z
  .object({ resourceType: z.literal('Parameters'), parameter: z.array(z.unknown()).max(0).optional() })
  .nullish()
  .describe('Nothing, or a Parameters without any parameter');

const rotateSecretParameter = z.union([
  z.object({ name: z.literal('secret'), valueString: z.string() }),
  z.object({ name: z.literal('overlapSeconds'), valueUnsignedInt: z.number() }),
  z.object({ name: z.literal('overlapSeconds'), valueInteger: z.number() }),
]);

/** What $rotate-secret takes: a Parameters with one secret, and at most one overlapSeconds. */
const rotateSecretParameters = z
  .object({ resourceType: z.literal('Parameters'), parameter: z.array(rotateSecretParameter) })
  .refine(({ parameter }) => parameter.filter((item) => item.name === 'secret').length === 1, 'give the new secret once')
  .refine(({ parameter }) => parameter.filter((item) => item.name === 'overlapSeconds').length <= 1, 'give overlapSeconds once at most')
  .describe('A Parameters: secret (valueString) and optionally overlapSeconds (valueUnsignedInt)')
  .meta({ examples: [{ resourceType: 'Parameters', parameter: [{ name: 'secret', valueString: 'the-new-secret' }, { name: 'overlapSeconds', valueUnsignedInt: 86400 }] }] });

/** A $rotate-secret body as a rotation: refused in the spec's format, never with the secret's value. */
function rotationRequest(body: unknown, defaultOverlapSeconds: number): RotationRequest {
  if (body === undefined || body === null) throw refusal('$rotate-secret takes a Parameters body with the new secret (valueString): none was sent');
  const parsed = rotateSecretParameters.safeParse(body);
  if (!parsed.success) {
    throw refusal(`$rotate-secret takes a Parameters with secret (valueString) and optionally overlapSeconds (valueUnsignedInt): ${parsed.error.issues[0]!.message}`);
  }
  let secret = '';
  let overlapSeconds = defaultOverlapSeconds;
  for (const parameter of parsed.data.parameter) {
    if (parameter.name === 'secret') secret = parameter.valueString;
    else overlapSeconds = 'valueUnsignedInt' in parameter ? parameter.valueUnsignedInt : parameter.valueInteger;
  }
  return { secret: checkedSecret(secret), overlapSeconds: checkedOverlapSeconds(overlapSeconds) };
}

const resendParameter = z.union([
  z.object({ name: z.literal('eventNumber'), valueString: z.string().regex(/^[1-9]\d{0,14}$/, 'eventNumber must be an event number') }),
  z.object({ name: z.literal('eventNumber'), valuePositiveInt: z.number().int().positive() }),
  z.object({ name: z.literal('attempt'), valueString: z.string().regex(/^\d{1,18}$/, 'attempt must be the id of a recorded call (webhook.delivery_attempts.id)') }),
  z.object({ name: z.literal('failedSince'), valueInstant: z.iso.datetime({ offset: true }) }),
  z.object({ name: z.literal('failedSince'), valueDateTime: z.iso.datetime({ offset: true }) }),
]);

/** What $resend takes: a Parameters with exactly one of eventNumber, attempt, failedSince. */
const resendParameters = z
  .object({ resourceType: z.literal('Parameters'), parameter: z.array(resendParameter).length(1, 'give exactly one of eventNumber, attempt, failedSince') })
  .describe('A Parameters: eventNumber (valueString or valuePositiveInt), attempt (valueString) or failedSince (valueInstant)')
  .meta({ examples: [{ resourceType: 'Parameters', parameter: [{ name: 'eventNumber', valueString: '7' }] }] });

function resendSelection(body: unknown): ResendSelection {
  const parsed = resendParameters.safeParse(body);
  if (!parsed.success) {
    throw refusal(`$resend takes a Parameters with exactly one of eventNumber, attempt, failedSince (an instant with its offset): ${parsed.error.issues[0]!.message}`);
  }
  const parameter = parsed.data.parameter[0]!;
  if (parameter.name === 'eventNumber') return { eventNumber: 'valueString' in parameter ? Number(parameter.valueString) : parameter.valuePositiveInt };
  if (parameter.name === 'attempt') return { attemptId: parameter.valueString };
  return { failedSince: new Date('valueInstant' in parameter ? parameter.valueInstant : parameter.valueDateTime) };
}

function resendAnswer({ queued, skipped }: ResendOutcome): Record<string, unknown> {
  const parts = (event: ResendOutcome['queued'][number]) => [
    ...(event.eventNumber === null ? [] : [{ name: 'eventNumber', valueString: String(event.eventNumber) }]),
    { name: 'resource', valueReference: { reference: event.resource } },
  ];
  const parameter: Record<string, unknown>[] = [
    ...queued.map((event) => ({ name: 'queued', part: parts(event) })),
    ...skipped.map((event) => ({ name: 'skipped', part: [...parts(event), { name: 'reason', valueString: event.reason }] })),
  ];
  // FHIR JSON has no empty arrays: when nothing matched (only failedSince can match nothing), the answer says so.
  if (parameter.length === 0) parameter.push({ name: 'outcome', valueString: nothingToResend });
  return { resourceType: 'Parameters', parameter };
}
