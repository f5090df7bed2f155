import { z } from 'zod';

/**
 * The R5 SubscriptionTopic as an operator gives it (FHIR R5, as the
 * Subscriptions Backport IG uses it on R4): the elements the service honours,
 * checked here where the definition enters. Elements it cannot honour are
 * refused by name (refusedElements), never half-applied; the rest of the
 * resource (title, description, publisher, …) is kept as given.
 */

const interaction = z.enum(['create', 'update', 'delete']);
const testResult = z.enum(['test-passes', 'test-fails']);
const criteria = z.string().trim().min(1);

const queryCriteria = z.object({
  previous: criteria.optional(),
  resultForCreate: testResult.optional(),
  current: criteria.optional(),
  resultForDelete: testResult.optional(),
  requireBoth: z.boolean().optional(),
});

const resourceTrigger = z.object({
  description: z.string().optional(),
  resource: z.string().min(1),
  supportedInteraction: z.array(interaction).min(1).optional(),
  queryCriteria: queryCriteria.optional(),
  fhirPathCriteria: criteria.optional(),
});

const canFilterBy = z.object({
  description: z.string().optional(),
  resource: z.string().min(1).optional(),
  filterParameter: z.string().min(1),
  filterDefinition: z.string().optional(),
  comparator: z.array(z.enum(['eq', 'ne', 'gt', 'lt', 'ge', 'le', 'sa', 'eb', 'ap'])).optional(),
  modifier: z.array(z.string().min(1)).optional(),
});

const notificationShape = z.object({
  resource: z.string().min(1),
  include: z.array(z.string().min(1)).optional(),
  revInclude: z.array(z.string().min(1)).optional(),
});

export const subscriptionTopicSchema = z.looseObject({
  resourceType: z.literal('SubscriptionTopic'),
  url: z.url(),
  version: z.string().min(1).optional(),
  title: z.string().optional(),
  status: z.enum(['draft', 'active', 'retired', 'unknown']),
  resourceTrigger: z.array(resourceTrigger).min(1),
  eventTrigger: z.array(z.unknown()).optional(),
  canFilterBy: z.array(canFilterBy).optional(),
  notificationShape: z.array(notificationShape).optional(),
});

export type SubscriptionTopic = z.infer<typeof subscriptionTopicSchema>;

/**
 * A definition the service cannot honour: the element
 * (`SubscriptionTopic.resourceTrigger[0].resource`), why, and, among several
 * definitions added together, which one (its index).
 */
export class TopicRefused extends Error {
  override name = 'TopicRefused';
  readonly element: string;
  readonly reason: string;
  readonly index: number | undefined;
  constructor(element: string, reason: string, index?: number) {
    super(`${element}: ${reason}`);
    this.element = element;
    this.reason = reason;
    this.index = index;
  }
}

/** Parses a SubscriptionTopic, refusing the first element it cannot take with its path. */
export function parseSubscriptionTopic(json: unknown): SubscriptionTopic {
  const parsed = subscriptionTopicSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new TopicRefused(elementPath(issue.path), issue.message);
  }
  const topic = parsed.data;
  if (topic.status === 'retired' || topic.status === 'unknown') {
    throw new TopicRefused('SubscriptionTopic.status', `a topic added is draft or active, not ${topic.status} (retire one with topics retire)`);
  }
  if (topic.eventTrigger !== undefined && topic.eventTrigger.length > 0) {
    throw new TopicRefused('SubscriptionTopic.eventTrigger', 'event triggers (messages and operations) are not supported: only resourceTrigger');
  }
  for (const [index, filter] of (topic.canFilterBy ?? []).entries()) {
    if (filter.filterDefinition !== undefined) {
      throw new TopicRefused(
        `SubscriptionTopic.canFilterBy[${index}].filterDefinition`,
        'custom SearchParameter definitions are not supported: name an R4 search parameter in filterParameter',
      );
    }
  }
  return topic;
}

/** ['resourceTrigger', 0, 'resource'] → SubscriptionTopic.resourceTrigger[0].resource */
function elementPath(path: readonly PropertyKey[]): string {
  return path.reduce<string>((text, key) => (typeof key === 'number' ? `${text}[${key}]` : `${text}.${String(key)}`), 'SubscriptionTopic');
}
