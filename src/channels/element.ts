import { z } from 'zod';

/**
 * The parts of Subscription.channel every channel's element (Channel.element)
 * shares. A refusal names what it refuses: the request shows the first one.
 */

/** A string element's refusal when it is missing or not a string. */
export const required = (name: string) => ({
  error: (issue: { input: unknown }) => (issue.input === undefined ? `${name} is required` : `${name} must be a string`),
});

const acceptedPayloads = new Set(['application/fhir+json', 'application/json']);

/** channel.payload: FHIR JSON (application/json is taken as the same). */
export const payload = z
  .string()
  .refine((value) => acceptedPayloads.has(value), 'channel.payload must be application/fhir+json')
  .optional();

/** An element that must not be given: `message` says why (described as never there). */
export const absent = (message: string) => z.never({ error: message }).optional();
