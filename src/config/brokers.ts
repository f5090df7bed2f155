import { z } from 'zod';

/**
 * The message brokers a subscription may publish to (BROKERS): the operator
 * names each connection and says which destinations in it subscriptions may
 * use; a subscription names a broker and a destination within those, never a
 * host (src/channels/nats-jetstream/). A JSON object, by name:
 *
 *   {"events": {"type": "nats-jetstream", "url": "nats://user:password@nats.internal:4222", "subjects": ["fhir.>"]},
 *    "integration": {"type": "rabbitmq", "url": "amqps://user:password@rabbit.internal/fhir", "exchanges": ["fhir"]}}
 *
 * The URL's credentials are the operator's: no message of this service shows
 * them (an error names the broker, never its URL).
 */
export type BrokerConnection =
  | {
      type: 'nats-jetstream';
      /** nats:// or tls://, with the user and password when the server wants them. */
      url: string;
      /** The subjects subscriptions may publish to, as NATS writes patterns: `*` one token, `>` the rest. */
      subjects: readonly string[];
    }
  | {
      type: 'rabbitmq';
      /** amqp:// or amqps://, with the user, password and virtual host. */
      url: string;
      /** The exchanges subscriptions may publish to (any routing key): the operator's, declared and bound by whoever consumes. */
      exchanges: readonly string[];
    };

export type Brokers = Readonly<Record<string, BrokerConnection>>;

/** A broker's name: what a subscription's endpoint says (nats-jetstream://events/fhir.encounter). */
const brokerName = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** A NATS subject pattern: tokens of printable characters without spaces, `*` a whole token, `>` the last one. */
export function isSubjectPattern(pattern: string): boolean {
  const tokens = pattern.split('.');
  return tokens.every((token, index) => /^[!-~]+$/.test(token) && (!/[*>]/.test(token) || token === '*' || (token === '>' && index === tokens.length - 1)));
}

/** A URL of one of `protocols`, checked without its text ever reaching a message. */
const urlOf = (protocols: string[]) =>
  z.string({ error: 'url is required' }).refine(
    (text) => {
      try {
        return protocols.includes(new URL(text).protocol);
      } catch {
        return false;
      }
    },
    `url must be a ${protocols.map((protocol) => `${protocol}//`).join(' or ')} URL`,
  );

const connection = z.discriminatedUnion(
  'type',
  [
    z.object({
      type: z.literal('nats-jetstream'),
      url: urlOf(['nats:', 'tls:']),
      subjects: z
        .array(z.string().refine(isSubjectPattern, 'each of subjects must be a NATS subject or pattern (fhir.>, fhir.*.created)'), {
          error: 'subjects must be a list of the subjects subscriptions may publish to, such as ["fhir.>"]',
        })
        .min(1, 'subjects must name at least one subject or pattern'),
    }),
    z.object({
      type: z.literal('rabbitmq'),
      url: urlOf(['amqp:', 'amqps:']),
      exchanges: z
        .array(z.string().regex(/^[A-Za-z0-9_.:-]{1,255}$/, 'each of exchanges must be an exchange name (letters, digits, _ . : -)'), {
          error: 'exchanges must be a list of the exchanges subscriptions may publish to, such as ["fhir"]',
        })
        .min(1, 'exchanges must name at least one exchange'),
    }),
  ],
  { error: 'type must be nats-jetstream or rabbitmq' },
);

/** BROKERS, parsed: each problem named by the broker and the field, never by the URL's text. */
export const brokersSetting = z.string().transform((text, context): Brokers => {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    context.addIssue({ code: 'custom', message: 'expected a JSON object of broker connections by name (docs/brokers.md)' });
    return z.NEVER;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    context.addIssue({ code: 'custom', message: 'expected a JSON object of broker connections by name (docs/brokers.md)' });
    return z.NEVER;
  }
  const brokers: Record<string, BrokerConnection> = {};
  for (const [name, value] of Object.entries(parsed)) {
    if (!brokerName.test(name)) {
      context.addIssue({ code: 'custom', message: `the broker name ${JSON.stringify(name.slice(0, 64))} must be lower-case letters, digits and dashes` });
      continue;
    }
    const checked = connection.safeParse(value);
    if (!checked.success) {
      const issue = checked.error.issues[0]!;
      context.addIssue({ code: 'custom', message: `broker ${name}: ${issue.path.length === 0 ? '' : `${issue.path.join('.')}: `}${issue.message}` });
      continue;
    }
    brokers[name] = checked.data;
  }
  return brokers;
});
