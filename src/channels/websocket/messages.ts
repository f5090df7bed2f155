import type { WebsocketCloseReason } from '../../metrics/metrics.ts';

/**
 * The words of the websocket protocol, on both sides: what a client may say
 * (its messages, read by clientMessageIn) and what the server answers that is
 * not a notification (a pong, a refusal and its close).
 */

/** What a client may send: a bind, and Medplum's unbind and keepalive. */
export type ClientMessage = { type: 'bind-with-token' | 'unbind-from-token'; token: string } | { type: 'ping' };

/**
 * A client's message: `bind-with-token <token>`, or Medplum's JSON forms
 * `{"type":"bind-with-token","payload":{"token":"…"}}`, `{"type":"unbind-from-token","payload":{"token":"…"}}`
 * and `{"type":"ping"}`; undefined for anything else.
 */
export function clientMessageIn(message: string): ClientMessage | undefined {
  const text = /^bind-with-token[ :]\s*(\S+)\s*$/.exec(message.trim());
  if (text !== null) return { type: 'bind-with-token', token: text[1]! };
  let json: { type?: unknown; payload?: { token?: unknown } } | null;
  try {
    json = JSON.parse(message) as typeof json;
  } catch {
    return undefined;
  }
  if (json?.type === 'ping') return { type: 'ping' };
  if (json?.type !== 'bind-with-token' && json?.type !== 'unbind-from-token') return undefined;
  const token = json.payload?.token;
  return typeof token === 'string' && token !== '' ? { type: json.type, token } : undefined;
}

/** What answers a client's keepalive ping (Medplum's server's words). */
export const pong = JSON.stringify({ type: 'pong' });

/** Why the server ends a connection: the reason counted, the close code, and the text of its OperationOutcome frame and close frame. */
export type Refusal = { reason: WebsocketCloseReason; code: number; text: string };

/** The OperationOutcome issue type of a refusal: a token or key refused is a security issue, a message not understood an invalid one. */
export function refusalIssueType(reason: WebsocketCloseReason): 'security' | 'invalid' | 'processing' {
  return reason === 'token' || reason === 'key-limit' ? 'security' : reason === 'malformed' ? 'invalid' : 'processing';
}

/** The longest close reason a close frame carries (125 bytes, less the code). */
const maxCloseReasonBytes = 123;

/** A close reason within the frame's 123 bytes. */
export function closeReason(text: string): string {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= maxCloseReasonBytes) return text;
  return `${bytes
    .subarray(0, maxCloseReasonBytes - 3)
    .toString('utf8')
    .replace(/\uFFFD$/, '')}...`;
}

/** The refusals a client's messages meet, whatever the server's limits. */
export const refusals = {
  stopping: { reason: 'shutdown', code: 1001, text: 'The service is stopping' },
  binaryFrame: { reason: 'malformed', code: 1003, text: 'Binary frames are not understood: send the text message bind-with-token <token>' },
  unknownMessage: { reason: 'malformed', code: 1003, text: 'Unknown message: send bind-with-token <token>, with a token from $get-ws-binding-token' },
  bindFailed: { reason: 'token', code: 1011, text: 'The bind failed on the server: try again with a new token' },
} as const satisfies Record<string, Refusal>;

/** A token redeemBindingToken refused (unknown, used or expired), with its words. */
export function tokenRefused(text: string): Refusal {
  return { reason: 'token', code: 1008, text };
}

/**
 * A binding that ended on the server's side: its subscription switched off, or
 * the API key that bound it revoked. The client is closed when nothing is left
 * bound, or when the key is revoked; else it is only told (`closes` false).
 */
export function bindingEnded(subscriptionId: string, switchedOff: boolean, nothingLeftBound: boolean): Refusal & { closes: boolean } {
  const text = switchedOff ? `Subscription/${subscriptionId} was switched off: nothing more is sent for it` : 'The API key that bound this client was revoked';
  return { reason: 'subscription-ended', code: switchedOff ? 1000 : 1008, text, closes: nothingLeftBound || !switchedOff };
}
