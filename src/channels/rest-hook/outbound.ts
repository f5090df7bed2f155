import { createHash, createHmac } from 'node:crypto';
import { request, type Dispatcher } from 'undici';
import { ShutdownAbort, shownEndpoint, type CallResult, type Channel, type ChannelTarget } from '../channel.ts';
import type { RestHookContext } from './calls.ts';
import { restHookElement } from './element.ts';
import { ForbiddenAddressError } from './ssrf.ts';

/**
 * The rest-hook channel (src/channels/channel.ts): one outbound webhook call,
 * the exact bytes, signed, with the subscription's headers, under an overall
 * deadline, and its result classified as the spec's response-handling table
 * says.
 */

export type CallOptions = {
  dispatcher: Dispatcher;
  /** Whole-response budget: undici's timeouts are per phase, so an overall abort signal bounds the sum. */
  responseTimeoutMs: number;
  /** Aborts the call early: the worker is shutting down (the job's abort signal). */
  signal?: AbortSignal;
};

const excerptLimit = 1024;
/** Read past the excerpt by this much, so that a secret cut by its end is still found whole and redacted. */
const excerptMargin = 4096;

/**
 * Rest-hook: POSTs the notification to the subscriber's endpoint, signed,
 * with an OAuth token when configured, within the places its origin has
 * (DELIVERY_MAX_CONNECTIONS_PER_ORIGIN). The Standard Webhooks webhook-id,
 * when those headers are on, is made from the notification's `message`.
 */
export const restHook: Channel<RestHookContext> = {
  type: 'rest-hook',
  receivers: { at: 'endpoint' },
  paced: true,
  topicOnly: false,
  element: restHookElement,
  async send(context, target, { body: resource, message }, signal) {
    const body = Buffer.from(JSON.stringify(resource));
    let token: string | undefined;
    if (context.tokens) {
      try {
        token = await context.tokens.token();
      } catch (error) {
        context.metrics.tokenRequestFailed();
        // TokenEndpointError messages say what failed ("OAuth token endpoint answered HTTP 500: …").
        const reason = error instanceof Error ? error.message : String(error);
        return {
          verdict: 'retryable',
          httpStatus: undefined,
          error: reason,
          responseExcerpt: undefined,
          retryAfterSeconds: undefined,
          startedAt: new Date(),
          durationMs: 0,
          failedAt: 'token-endpoint',
        };
      }
    }
    const standard = context.delivery.standardSignatures ? { messageId: messageId(target.id, message) } : undefined;
    const giveBack = await context.originCalls.take(target.endpoint, target.id, signal);
    let result: CallResult;
    try {
      result = await postWebhook(target.endpoint, body, outboundHeaders(target.headers, body, signingSecrets(target), token, standard), {
        dispatcher: context.dispatcher,
        responseTimeoutMs: Math.min(context.delivery.responseTimeoutMs, target.topic?.timeoutMs ?? Infinity),
        ...(signal === undefined ? {} : { signal }),
      });
    } finally {
      giveBack();
    }
    if (result.refusedAddress !== undefined) {
      context.logger.warn({ subscriptionId: target.id, address: result.refusedAddress, error: result.error }, 'SSRF guard refused a delivery address');
    }
    // Only the abort itself: an answer that came in just before it stands.
    if (signal?.aborted && result.verdict === 'retryable' && result.httpStatus === undefined) {
      throw new ShutdownAbort(`the call to ${shownEndpoint(target.endpoint)} was cut short by the worker's shutdown; the job runs again`);
    }
    return result;
  },
};

/** `sha256=<hex HMAC-SHA256 of the body>`, the X-Hub-Signature format. */
export function signature(body: Buffer, secret: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/**
 * The Standard Webhooks headers (standardwebhooks.com), keyed with the
 * secrets' UTF-8 bytes: `webhook-id` (the same for every retry of one
 * message), `webhook-timestamp` (when this try was sent, in seconds) and
 * `webhook-signature` (`v1,<base64 HMAC-SHA256 of id.timestamp.body>`, one per
 * secret, space-separated: the standard's way to rotate a secret), so that a
 * receiver can refuse a replayed call. Verify with the Standard Webhooks
 * libraries, which accept a call when any of its signatures matches:
 * `new Webhook(secret, { format: 'raw' }).verify(body, headers)`.
 */
export function standardWebhookHeaders(messageId: string, body: Buffer, secrets: readonly string[], now = new Date()): [string, string][] {
  const timestamp = String(Math.floor(now.getTime() / 1000));
  const signatures = secrets.map((secret) => `v1,${createHmac('sha256', secret).update(`${messageId}.${timestamp}.`).update(body).digest('base64')}`);
  return [
    ['webhook-id', messageId],
    ['webhook-timestamp', timestamp],
    ['webhook-signature', signatures.join(' ')],
  ];
}

/** A header the service sets itself (in lower case): Content-Type, X-Hub-Signature (and -Next) and the Standard Webhooks ones. */
function isServiceHeader(name: string): boolean {
  return name === 'content-type' || name === 'x-hub-signature' || name === 'x-hub-signature-next' || name.startsWith('webhook-');
}

/**
 * What a call is signed with: the subscription's secret, and during a
 * rotation's overlap the secret before it (src/subscriptions/rotation.ts).
 */
export type SigningSecrets = { current: string; previous: string | undefined };

/** What a call made now is signed with: the current secret, and the previous one while its overlap lasts. */
function signingSecrets({ secret, previousSecret }: Pick<ChannelTarget, 'secret' | 'previousSecret'>): SigningSecrets {
  return { current: secret, previous: previousSecret !== undefined && previousSecret.until.getTime() > Date.now() ? previousSecret.secret : undefined };
}

/** A message's webhook-id: what the message is (a subscription's event or handshake), hashed, the same for every retry. */
export function messageId(subscriptionId: string, message: string): string {
  return `msg_${createHash('sha256').update(`${subscriptionId} ${message}`).digest('base64url').slice(0, 27)}`;
}

/**
 * The request headers: every channel.header item verbatim (split on the first
 * colon only: values may contain colons), then the service's own, which no
 * client header can override, then an OAuth bearer replacing any client
 * Authorization; with `standard`, the Standard Webhooks headers too.
 *
 * X-Hub-Signature carries one signature. During a rotation's overlap it stays
 * the previous secret's, which every receiver holds until it has switched, and
 * X-Hub-Signature-Next carries the new one's; after the overlap only the
 * current secret signs. A receiver that accepts either header under either
 * secret it holds (docs/receivers.md) never refuses a genuine call while it
 * switches. webhook-signature carries both signatures, the current first.
 */
export function outboundHeaders(
  channelHeaders: readonly string[],
  body: Buffer,
  secrets: SigningSecrets,
  bearerToken: string | undefined,
  standard?: { messageId: string },
): [string, string][] {
  const headers: [string, string][] = channelHeaders.map((item) => {
    const colon = item.indexOf(':');
    return [item.slice(0, colon).trim(), item.slice(colon + 1).trim()];
  });
  const kept = headers.filter(([name]) => {
    const lower = name.toLowerCase();
    return !isServiceHeader(lower) && !(bearerToken !== undefined && lower === 'authorization');
  });
  const { current, previous } = secrets;
  return [
    ...kept,
    ['content-type', 'application/fhir+json'],
    ...((previous === undefined
      ? [['x-hub-signature', signature(body, current)]]
      : [
          ['x-hub-signature', signature(body, previous)],
          ['x-hub-signature-next', signature(body, current)],
        ]) as [string, string][]),
    ...(bearerToken === undefined ? [] : ([['authorization', `Bearer ${bearerToken}`]] as [string, string][])),
    ...(standard === undefined ? [] : standardWebhookHeaders(standard.messageId, body, previous === undefined ? [current] : [current, previous])),
  ];
}

export async function postWebhook(endpoint: string, body: Buffer, headers: [string, string][], options: CallOptions): Promise<CallResult> {
  const startedAt = new Date();
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  try {
    const response = await request(endpoint, {
      method: 'POST',
      body,
      headers: headers.flat(),
      dispatcher: options.dispatcher,
      signal:
        options.signal === undefined
          ? AbortSignal.timeout(options.responseTimeoutMs)
          : AbortSignal.any([AbortSignal.timeout(options.responseTimeoutMs), options.signal]),
    });
    // A receiver that echoes its request must not put our headers' values (a secret, a token) into the attempt record.
    const excerpt = redacted(await readExcerpt(response.body), sentSecrets(headers));
    const status = response.statusCode;
    const verdict = status >= 200 && status < 300 ? 'delivered' : status === 429 || status >= 500 ? 'retryable' : 'permanent';
    return {
      verdict,
      httpStatus: status,
      error: verdict === 'delivered' ? undefined : `HTTP ${status}`,
      responseExcerpt: excerpt,
      retryAfterSeconds: status === 429 || status === 503 ? parseRetryAfter(response.headers['retry-after']) : undefined,
      startedAt,
      durationMs: elapsed(),
    };
  } catch (error) {
    const refused = error instanceof Error ? causes(error).find((cause): cause is ForbiddenAddressError => cause instanceof ForbiddenAddressError) : undefined;
    return {
      verdict: refused ? 'permanent' : 'retryable',
      httpStatus: undefined,
      // What the subscriber (who reads the error) may know: that the address is not public, not which inside address its name resolved to.
      error: refused
        ? `refused: the endpoint's address is not public (${refused.reason}); set WEBHOOK_ALLOW_PRIVATE_NETWORKS=true only for development`
        : describeNetworkError(error),
      ...(refused ? { refusedAddress: refused.address } : {}),
      responseExcerpt: undefined,
      retryAfterSeconds: undefined,
      startedAt,
      durationMs: elapsed(),
    };
  }
}

/**
 * The start of the answer's body. The verdict is the status's: a body that
 * stalls or breaks off after it (a Content-Length never met) ends the excerpt
 * where it stopped, at the latest when the response budget runs out.
 */
async function readExcerpt(body: AsyncIterable<Buffer> & { destroy(): unknown }): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  let length = 0;
  try {
    for await (const chunk of body) {
      chunks.push(chunk);
      length += chunk.length;
      if (length >= excerptLimit + excerptMargin) break;
    }
  } catch {
    // Aborted by the response budget, or the connection closed: what arrived is the excerpt.
  }
  body.destroy();
  if (length === 0) return undefined;
  return Buffer.concat(chunks)
    .subarray(0, excerptLimit + excerptMargin)
    .toString('utf8');
}

/** The values of the headers sent that could be secrets (all but ours and the trivially short), and a bearer token alone. */
function sentSecrets(headers: readonly [string, string][]): string[] {
  return headers
    .filter(([name]) => !isServiceHeader(name.toLowerCase()))
    .flatMap(([, value]) => [value, ...(/^bearer\s+/i.test(value) ? [value.replace(/^bearer\s+/i, '')] : [])])
    .filter((value) => value.length >= 4)
    .sort((a, b) => b.length - a.length);
}

/** The excerpt with each secret replaced by [redacted], then cut to excerptLimit characters. */
function redacted(text: string | undefined, secrets: readonly string[]): string | undefined {
  if (text === undefined) return undefined;
  const clean = secrets.reduce((result, secret) => result.replaceAll(secret, '[redacted]'), text);
  return clean.slice(0, excerptLimit);
}

/** Retry-After as seconds from now: a number of seconds or an HTTP date. */
function parseRetryAfter(value: string | string[] | undefined): number | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (text === undefined) return undefined;
  if (/^\d+$/.test(text.trim())) return Number(text.trim());
  const date = Date.parse(text);
  return Number.isNaN(date) ? undefined : Math.max(0, Math.ceil((date - Date.now()) / 1000));
}

function causes(error: Error): Error[] {
  const chain: Error[] = [];
  for (let current: unknown = error; current instanceof Error && chain.length < 10; current = current.cause) chain.push(current);
  return chain;
}

/** The innermost useful message: "connect ECONNREFUSED 127.0.0.1:9", "request timed out after 15000 ms", ... */
function describeNetworkError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  if (error.name === 'TimeoutError' || error.name === 'AbortError') return 'no complete response within the response timeout';
  const chain = causes(error);
  const innermost = chain.at(-1)!;
  const code = (innermost as { code?: string }).code;
  return code && !innermost.message.includes(code) ? `${code}: ${innermost.message}` : innermost.message;
}
