import type { RetryPolicyBounds } from '../config/index.ts';
import { refusal } from '../fhir/outcome.ts';

/**
 * A subscription's own retry policy: how many attempts an event (and the
 * handshake) has before the subscription goes to `error`, and the delays
 * between them, in place of DELIVERY_MAX_FAILURES and
 * DELIVERY_RETRY_DELAYS_MS, within the operator's RETRY_POLICY_* bounds. On
 * every channel. Said by the service's own extension on the Subscription:
 *
 *   { "url": "<base>/fhir/resources/StructureDefinition/retry-policy", "extension": [
 *       { "url": "maxAttempts", "valuePositiveInt": 5 },
 *       { "url": "firstDelay", "valueDuration": { "value": 30, "system": "http://unitsofmeasure.org", "code": "s" } },
 *       { "url": "growth", "valueDecimal": 2 },
 *       { "url": "maxDelay", "valueDuration": { "value": 1, "system": "http://unitsofmeasure.org", "code": "h" } } ] }
 *
 * and, so that subscriptions written for them keep their meaning, by HAPI
 * FHIR's subscription-delivery-retry-count (retries after the first attempt,
 * on the Subscription or its channel) and Medplum's subscription-max-attempts
 * (attempts in all). Absent, the service's settings apply (the
 * specification's: error from the third unsuccessful attempt, by default).
 */
export type RetryPolicy = {
  /** Attempts of one event before the subscription goes to error; undefined: DELIVERY_MAX_FAILURES. */
  maxAttempts: number | undefined;
  /** The delays between attempts; undefined: DELIVERY_RETRY_DELAYS_MS. */
  backoff: Backoff | undefined;
};

/** A delay that starts at firstDelayMs and is multiplied by growth at each retry, up to maxDelayMs. */
export type Backoff = { firstDelayMs: number; growth: number; maxDelayMs: number };

/** The service's extension on the Subscription, named under its base as its other extensions are. */
export function retryPolicyExtension(baseUrl: string): string {
  return `${baseUrl}/fhir/resources/StructureDefinition/retry-policy`;
}

/** HAPI FHIR's: the retries after the first attempt (HapiExtensions.EX_RETRY_COUNT). */
export const hapiRetryCountExtension = 'http://hapifhir.io/fhir/StructureDefinition/subscription-delivery-retry-count';
/** Medplum's: the attempts in all (1 to 18 there). */
export const medplumMaxAttemptsExtension = 'https://medplum.com/fhir/StructureDefinition/subscription-max-attempts';

/** The most a delay may grow by at each retry: beyond it, the second delay is already the longest. */
const maxGrowth = 10;

type Extension = { url: string; [value: string]: unknown };

/**
 * The retry policy a request's extensions say (those on the Subscription and
 * on its channel), checked against the operator's bounds: a 400 naming the
 * bound when it asks for more, or when two extensions say different numbers
 * of attempts.
 */
export function parseRetryPolicy(subscriptionExtensions: Extension[], channelExtensions: Extension[], bounds: RetryPolicyBounds, baseUrl: string): RetryPolicy {
  const said: { attempts: number; by: string }[] = [];
  const policies = subscriptionExtensions.filter((item) => item.url === retryPolicyExtension(baseUrl));
  if (policies.length > 1) throw refusal('The Subscription has more than one retry-policy extension');
  const own = policies[0] === undefined ? undefined : parseOwnPolicy(policies[0], bounds);
  if (own?.maxAttempts !== undefined) said.push({ attempts: own.maxAttempts, by: "retry-policy's maxAttempts" });
  for (const item of [...subscriptionExtensions, ...channelExtensions].filter((candidate) => candidate.url === hapiRetryCountExtension)) {
    said.push({ attempts: wholeValue(item, 'valueInteger', 'subscription-delivery-retry-count', 0) + 1, by: 'subscription-delivery-retry-count' });
  }
  for (const item of subscriptionExtensions.filter((candidate) => candidate.url === medplumMaxAttemptsExtension)) {
    said.push({ attempts: wholeValue(item, 'valueInteger', 'subscription-max-attempts', 1), by: 'subscription-max-attempts' });
  }
  const attempts = [...new Set(said.map((item) => item.attempts))];
  if (attempts.length > 1) throw refusal(`${said.map((item) => `${item.by} (${item.attempts} attempts)`).join(' and ')} say different numbers of attempts`);
  const maxAttempts = attempts[0];
  if (maxAttempts !== undefined && maxAttempts > bounds.maxAttempts) {
    throw refusal(`${said[0]!.by} asks for ${maxAttempts} attempts; this service allows at most ${bounds.maxAttempts} (RETRY_POLICY_MAX_ATTEMPTS)`);
  }
  return { maxAttempts, backoff: own?.backoff };
}

/** The service's retry-policy extension: its parts, each once at most, the backoff whole or absent. */
function parseOwnPolicy(policy: Extension, bounds: RetryPolicyBounds): RetryPolicy {
  const parts = Array.isArray(policy.extension) ? (policy.extension as Extension[]) : [];
  if (parts.length === 0) throw refusal('retry-policy needs its parts as extensions: maxAttempts, firstDelay, growth, maxDelay');
  const part = (name: string) => {
    const found = parts.filter((item) => item?.url === name);
    if (found.length > 1) throw refusal(`retry-policy has ${name} twice`);
    return found[0];
  };
  const unknown = parts.find((item) => !['maxAttempts', 'firstDelay', 'growth', 'maxDelay'].includes(item?.url));
  if (unknown !== undefined)
    throw refusal(`retry-policy has a part this service does not know: ${String(unknown?.url)} (maxAttempts, firstDelay, growth, maxDelay)`);
  const attempts = part('maxAttempts');
  const maxAttempts = attempts === undefined ? undefined : wholeValue(attempts, 'valuePositiveInt', "retry-policy's maxAttempts", 1);
  const [first, growthPart, longest] = [part('firstDelay'), part('growth'), part('maxDelay')];
  if (first === undefined) {
    if (growthPart !== undefined || longest !== undefined) throw refusal("retry-policy's growth and maxDelay need its firstDelay");
    return { maxAttempts, backoff: undefined };
  }
  const firstDelayMs = durationMs(first, 'firstDelay');
  const growth = growthPart === undefined ? 2 : decimalValue(growthPart, 'growth');
  const maxDelayMs = longest === undefined ? bounds.maxDelayMs : durationMs(longest, 'maxDelay');
  if (firstDelayMs < bounds.minDelayMs) {
    throw refusal(
      `retry-policy's firstDelay is ${firstDelayMs} ms; this service waits at least ${bounds.minDelayMs} ms between attempts (RETRY_POLICY_MIN_DELAY_MS)`,
    );
  }
  if (maxDelayMs > bounds.maxDelayMs) {
    throw refusal(
      `retry-policy's maxDelay is ${maxDelayMs} ms; this service waits at most ${bounds.maxDelayMs} ms between attempts (RETRY_POLICY_MAX_DELAY_MS)`,
    );
  }
  if (maxDelayMs < firstDelayMs) throw refusal(`retry-policy's maxDelay (${maxDelayMs} ms) is shorter than its firstDelay (${firstDelayMs} ms)`);
  if (growth < 1 || growth > maxGrowth) throw refusal(`retry-policy's growth must be between 1 and ${maxGrowth}`);
  return { maxAttempts, backoff: { firstDelayMs, growth, maxDelayMs } };
}

function wholeValue(item: Extension, key: string, name: string, least: number): number {
  const value = item[key];
  if (typeof value !== 'number' || !Number.isInteger(value) || value < least) throw refusal(`${name} must have a ${key} of ${least} or more`);
  return value;
}

function decimalValue(item: Extension, name: string): number {
  const value = item.valueDecimal;
  if (typeof value !== 'number' || !Number.isFinite(value)) throw refusal(`retry-policy's ${name} must have a valueDecimal`);
  return value;
}

/** A valueDuration's milliseconds, of the UCUM units of time a delay is said in. */
const unitMs: Record<string, number> = { ms: 1, s: 1_000, min: 60_000, h: 3_600_000, d: 86_400_000 };

function durationMs(item: Extension, name: string): number {
  const duration = item.valueDuration as { value?: unknown; code?: unknown; system?: unknown } | undefined;
  const factor = typeof duration?.code === 'string' ? unitMs[duration.code] : undefined;
  if (typeof duration?.value !== 'number' || factor === undefined || (duration.system !== undefined && duration.system !== 'http://unitsofmeasure.org')) {
    throw refusal(`retry-policy's ${name} must have a valueDuration with a value and a UCUM code among ${Object.keys(unitMs).join(', ')}`);
  }
  const ms = Math.round(duration.value * factor);
  if (Math.abs(ms - duration.value * factor) > 1e-6 || ms <= 0 || ms > 2 ** 31 - 1)
    throw refusal(`retry-policy's ${name} must be a whole number of milliseconds, more than none`);
  return ms;
}

/** The retry policy a subscription was stored with (webhook.subscriptions' columns, migration 0038). */
export function retryPolicyOf(row: {
  max_attempts: number | null;
  retry_first_delay_ms: number | null;
  retry_delay_growth: string | null;
  retry_max_delay_ms: number | null;
}): RetryPolicy {
  return {
    maxAttempts: row.max_attempts ?? undefined,
    backoff:
      row.retry_first_delay_ms === null || row.retry_delay_growth === null || row.retry_max_delay_ms === null
        ? undefined
        : { firstDelayMs: row.retry_first_delay_ms, growth: Number(row.retry_delay_growth), maxDelayMs: row.retry_max_delay_ms },
  };
}

/** The policy as the service's extension, for a subscription's representation; none when it has none. */
export function retryPolicyExtensions(policy: RetryPolicy, baseUrl: string): Extension[] {
  if (policy.maxAttempts === undefined && policy.backoff === undefined) return [];
  const milliseconds = (value: number) => ({ value, unit: 'ms', system: 'http://unitsofmeasure.org', code: 'ms' });
  return [
    {
      url: retryPolicyExtension(baseUrl),
      extension: [
        ...(policy.maxAttempts === undefined ? [] : [{ url: 'maxAttempts', valuePositiveInt: policy.maxAttempts }]),
        ...(policy.backoff === undefined
          ? []
          : [
              { url: 'firstDelay', valueDuration: milliseconds(policy.backoff.firstDelayMs) },
              { url: 'growth', valueDecimal: policy.backoff.growth },
              { url: 'maxDelay', valueDuration: milliseconds(policy.backoff.maxDelayMs) },
            ]),
      ],
    },
  ];
}
