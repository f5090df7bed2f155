import { z } from 'zod';
import { payload, required } from '../element.ts';

/**
 * rest-hook's Subscription.channel (Channel.element): an http(s) endpoint,
 * and headers sent with every call, each `Name: value`, that can be sent as
 * given. A refusal of a header names the item by its position and its header
 * name, never its value, which may be a secret.
 */

/** `Name: value`, split on the first colon only: values may contain colons (and, to be refused by name, line breaks). */
const headerPattern = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(\S.*)$/s;
/** Headers the service sets itself; a client value would break signature checks. */
const serviceHeaders = new Set(['content-type', 'x-hub-signature', 'x-hub-signature-next', 'webhook-id', 'webhook-timestamp', 'webhook-signature']);
/** Headers about the connection or the message's framing, which the HTTP client owns: a value from a client could never be sent as given. */
const transportHeaders = new Set([
  'content-length',
  'transfer-encoding',
  'host',
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
  'expect',
]);
/** What one subscription may ask to be sent with every call. */
const maxHeaders = 50;
const maxHeaderLength = 4096;
/** A header value is Latin-1 text without control characters (a tab aside): what HTTP can carry. */
const headerValuePattern = /^[\t\x20-\x7e\x80-\xff]*$/;

const headers = z
  .array(z.string({ error: 'channel.header items must be strings of the form "Name: value"' }), { error: 'channel.header must be an array of strings' })
  .max(maxHeaders, `channel.header has more than ${maxHeaders} items`)
  .superRefine((items, context) => {
    items.forEach((item, index) => {
      const problem = headerProblem(item);
      if (problem !== undefined) context.addIssue({ code: 'custom', message: `channel.header item ${index + 1} ${problem}` });
    });
  });

export const restHookElement = z.object({
  type: z.literal('rest-hook'),
  endpoint: z
    .string(required('channel.endpoint'))
    .refine(isHttpUrl, 'channel.endpoint must be an absolute http or https URL')
    .describe('Where the service POSTs its notifications'),
  payload,
  header: headers.optional().describe('Sent with every call, each "Name: value"; a secret header signs the calls'),
});
function headerProblem(item: string): string | undefined {
  if (item.length > maxHeaderLength) return `is longer than ${maxHeaderLength} characters`;
  const match = headerPattern.exec(item);
  if (!match) return 'is not of the form "Name: value"';
  const name = match[1]!;
  if (serviceHeaders.has(name.toLowerCase())) return `(${name}) is set by the service, and a client value would break signature checks`;
  if (transportHeaders.has(name.toLowerCase())) return `(${name}) is about the connection, which the service's HTTP client manages`;
  if (!headerValuePattern.test(match[2]!)) return `(${name}) has a value HTTP cannot carry (control characters, or characters beyond Latin-1)`;
  return undefined;
}

/** A channel.header item's name as written, or undefined when it is not `Name: value`. */
export function headerName(item: string): string | undefined {
  return headerPattern.exec(item)?.[1];
}

/**
 * Why `value` cannot be a signing secret given on its own (a rotation's new
 * secret), or undefined when it can: what the value of a `secret` header may
 * be when a subscription is created, and whole (white space around it would
 * be lost from the header that carries it). It never names the value.
 */
export function secretValueProblem(value: string): string | undefined {
  const longest = maxHeaderLength - 'secret: '.length;
  if (value === '') return 'is empty';
  if (value.length > longest) return `is longer than ${longest} characters`;
  if (!headerValuePattern.test(value)) return 'has characters HTTP cannot carry (control characters, or characters beyond Latin-1)';
  if (/^[ \t]|[ \t]$/.test(value)) return 'begins or ends with white space, which the secret header would lose';
  return undefined;
}

/** The values of the `secret` headers among channel.header items (each item valid). */
export function secretHeaderValues(items: readonly string[]): string[] {
  return items
    .map((item) => headerPattern.exec(item)!)
    .filter((match) => match[1]!.toLowerCase() === 'secret')
    .map((match) => match[2]!);
}

function isHttpUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
  } catch {
    return false;
  }
}
