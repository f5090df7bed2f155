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
} as const;

export const payloadContents = ['empty', 'id-only', 'full-resource'] as const;
export type PayloadContent = (typeof payloadContents)[number];
