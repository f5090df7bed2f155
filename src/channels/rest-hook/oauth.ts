import { request } from 'undici';
import type { Config } from '../../config/index.ts';

export type OAuthConfig = NonNullable<Config['oauth']>;

/** Bearer tokens for webhook deliveries; one provider is shared by every delivery. */
export type TokenProvider = { token(): Promise<string> };

/** The token endpoint gave no usable token; the message never holds the client secret or a token. */
export class TokenEndpointError extends Error {
  override name = 'TokenEndpointError';
}

const DEFAULT_TIMEOUT_MS = 10_000;
/** Lifetime assumed when the endpoint omits expires_in (RFC 6749 makes it optional). */
const DEFAULT_LIFETIME_MS = 60_000;
/** A token is renewed this long before it expires, so a delivery never carries one that lapses in flight. */
const MAX_RENEWAL_MARGIN_MS = 30_000;
/** Server-supplied error text is cut to this length to keep log lines readable. */
const MAX_REASON_LENGTH = 200;

type CachedToken = { value: string; renewAt: number };

/**
 * Client-credentials grant (RFC 6749 §4.4) with the credentials in the form
 * body. The token is cached until shortly before it expires, and callers that
 * arrive while a request is in flight share it; a failure is not cached.
 */
export function createTokenProvider(oauth: OAuthConfig, options: { timeoutMs?: number } = {}): TokenProvider {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  let cached: CachedToken | undefined;
  let inFlight: Promise<string> | undefined;

  async function refresh(): Promise<string> {
    // Counted from the request, not the answer, so a slow endpoint cannot stretch the token's life.
    const requestedAt = performance.now();
    const { accessToken, lifetimeMs } = await fetchToken(oauth, timeoutMs);
    cached = { value: accessToken, renewAt: requestedAt + lifetimeMs };
    return accessToken;
  }

  return {
    async token() {
      if (cached !== undefined && performance.now() < cached.renewAt) return cached.value;
      inFlight ??= refresh().finally(() => {
        inFlight = undefined;
      });
      return inFlight;
    },
  };
}

async function fetchToken(oauth: OAuthConfig, timeoutMs: number): Promise<{ accessToken: string; lifetimeMs: number }> {
  const { statusCode, text } = await post(oauth, timeoutMs);
  const body = parseJson(text);
  if (statusCode < 200 || statusCode > 299) {
    throw new TokenEndpointError(`OAuth token endpoint answered HTTP ${statusCode}${oauthErrorOf(body, oauth)}`);
  }
  if (body === undefined) throw new TokenEndpointError(`OAuth token endpoint answered HTTP ${statusCode} with a body that is not a JSON object`);
  const accessToken = body.access_token;
  if (typeof accessToken !== 'string' || accessToken === '') {
    throw new TokenEndpointError(`OAuth token endpoint answered HTTP ${statusCode} without an access_token`);
  }
  return { accessToken, lifetimeMs: lifetimeMsOf(body.expires_in) };
}

async function post(oauth: OAuthConfig, timeoutMs: number): Promise<{ statusCode: number; text: string }> {
  const form = new URLSearchParams({ grant_type: 'client_credentials', client_id: oauth.clientId, client_secret: oauth.clientSecret });
  if (oauth.scope !== undefined) form.set('scope', oauth.scope);
  if (oauth.audience !== undefined) form.set('audience', oauth.audience);
  try {
    // One signal for connect, headers and body: the whole exchange must fit in timeoutMs.
    const response = await request(oauth.tokenUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      body: form.toString(),
      signal: AbortSignal.timeout(timeoutMs),
    });
    return { statusCode: response.statusCode, text: await response.body.text() };
  } catch (error) {
    throw new TokenEndpointError(`OAuth token request failed: ${describeFailure(error, timeoutMs)}`, { cause: error });
  }
}

function describeFailure(error: unknown, timeoutMs: number): string {
  if (!(error instanceof Error)) return String(error);
  if (error.name === 'TimeoutError') return `no answer within ${timeoutMs} ms`;
  // Node reports a failed connection to every address of a host as an AggregateError without a message.
  return error.message || ((error as NodeJS.ErrnoException).code ?? error.name);
}

function parseJson(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** ": error (error_description)" from an RFC 6749 §5.2 error body, or nothing. */
function oauthErrorOf(body: Record<string, unknown> | undefined, oauth: OAuthConfig): string {
  if (typeof body?.error !== 'string') return '';
  const description = typeof body.error_description === 'string' ? ` (${body.error_description})` : '';
  // The text is the server's, and a careless server may echo what it was sent.
  const reason = `${body.error}${description}`.replaceAll(oauth.clientSecret, '[redacted]');
  return `: ${reason.slice(0, MAX_REASON_LENGTH)}`;
}

/** expires_in minus the smaller of 30 s and 10 %; some servers send it as a string. */
function lifetimeMsOf(expiresIn: unknown): number {
  const seconds = typeof expiresIn === 'string' && expiresIn.trim() !== '' ? Number(expiresIn) : expiresIn;
  if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0) return DEFAULT_LIFETIME_MS;
  const lifetimeMs = seconds * 1000;
  return lifetimeMs - Math.min(MAX_RENEWAL_MARGIN_MS, lifetimeMs * 0.1);
}
