/**
 * The names the FHIR Subscriptions R5 Backport IG (STU 1.1) gives what a
 * topic-based subscription on R4 says: its extensions, profiles and
 * operations. Everything that reads or writes them takes them from here.
 */

const base = 'http://hl7.org/fhir/uv/subscriptions-backport';
const extension = (name: string) => `${base}/StructureDefinition/${name}`;

export const backport = {
  /** Profile of a topic-based Subscription (meta.profile, CapabilityStatement supportedProfile). */
  subscriptionProfile: extension('backport-subscription'),
  /** Profile of the status Parameters: notifications, $status. */
  statusProfile: extension('backport-subscription-status-r4'),
  /** On Subscription.criteria (`_criteria`): a filter, valueString `Encounter?patient=Patient/123`. */
  filterCriteria: extension('backport-filter-criteria'),
  /** On Subscription.channel.payload (`_payload`): valueCode empty | id-only | full-resource. */
  payloadContent: extension('backport-payload-content'),
  /** On Subscription.channel: valueUnsignedInt, seconds. */
  heartbeatPeriod: extension('backport-heartbeat-period'),
  /** On Subscription.channel: valueUnsignedInt, seconds. */
  timeout: extension('backport-timeout'),
  /** On Subscription.channel: valuePositiveInt. */
  maxCount: extension('backport-max-count'),
  /** On CapabilityStatement.rest.resource (Subscription): valueCanonical, one per topic. */
  topicCanonical: extension('capabilitystatement-subscriptiontopic-canonical'),
  /** The IG's CapabilityStatement for an R4 server (CapabilityStatement.instantiates). */
  serverCapabilities: `${base}/CapabilityStatement/backport-subscription-server-r4`,
  statusOperation: `${base}/OperationDefinition/backport-subscription-status`,
  eventsOperation: `${base}/OperationDefinition/backport-subscription-events`,
  getWsBindingTokenOperation: `${base}/OperationDefinition/backport-subscription-get-ws-binding-token`,
} as const;

/**
 * How the IG represents an R5 SubscriptionTopic on R4, which has no such type
 * (its example r4-encounter-complete): a Basic with this code and profile,
 * the canonical URL and the status in the core artifact extensions, and every
 * other element as a cross-version extension (topicElement('version'), …).
 * r4-representation.ts builds it.
 */
export const topicOnR4 = {
  /** Basic.code.coding: the FHIR type the Basic stands for. */
  code: { system: 'http://hl7.org/fhir/fhir-types', code: 'SubscriptionTopic' },
  /** Basic.meta.profile: the cross-version profile of R5's SubscriptionTopic on R4. */
  profile: 'http://hl7.org/fhir/5.0/StructureDefinition/profile-SubscriptionTopic',
  /** Basic.extension: the topic's canonical URL, valueUri. */
  artifactUrl: 'http://hl7.org/fhir/StructureDefinition/artifact-url',
  /** Basic.modifierExtension: draft | active | retired | unknown, valueCode. */
  artifactStatus: 'http://hl7.org/fhir/StructureDefinition/artifact-status',
} as const;

/** The cross-version extension of R5's SubscriptionTopic.<element> (`resourceTrigger`, `version`, …). */
export const topicElement = (element: string) => `http://hl7.org/fhir/5.0/StructureDefinition/extension-SubscriptionTopic.${element}`;
