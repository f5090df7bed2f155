import { topicElement, topicOnR4 } from './backport.ts';
import type { StoredTopic } from './store.ts';

/**
 * A topic as an R4 server serves it. R4 has no SubscriptionTopic type, so
 * the Subscriptions Backport IG represents one as a Basic (its example
 * r4-encounter-complete): code fhir-types#SubscriptionTopic, meta.profile
 * the cross-version profile, the canonical URL in artifact-url, the status in
 * the modifierExtension artifact-status (each also as the cross-version
 * profile requires it: extension-SubscriptionTopic.url, .status), and every other element of the R5
 * definition as the cross-version extension
 * `…/extension-SubscriptionTopic.<element>`, in R4's data type for it. A
 * backbone element (resourceTrigger, canFilterBy, …) is a complex extension
 * whose sub-extensions are named for its children (`resource`,
 * `queryCriteria`, …), one per repeat.
 *
 * The definition is stored as the operator gave it (definition.ts checks only
 * what the service honours), so each value is carried only when it fits its
 * R4 type, and empty arrays, objects and strings are left out: what is served
 * is valid R4 JSON whatever the file held. Left out as well: the topic's
 * meta (the Basic has its own), contained resources (R5 resources), the id,
 * extensions and modifierExtensions of backbone elements, and the topic's own
 * extensions whose values are of types R4 lacks (docs/topics.md).
 */

type Json = Record<string, unknown>;

/** The R4 data types a topic's elements are carried as. */
type R4Type =
  | 'string'
  | 'markdown'
  | 'uri'
  | 'canonical'
  | 'code'
  | 'boolean'
  | 'date'
  | 'dateTime'
  | 'Identifier'
  | 'Coding'
  | 'CodeableConcept'
  | 'ContactDetail'
  | 'UsageContext'
  | 'Period';

/**
 * An element of the R5 SubscriptionTopic (or of one of its backbone
 * elements) and its extension: named `element`, read from `from` (a choice
 * type's JSON name, `versionAlgorithmString`) or `element`, one extension per
 * repeat; a backbone element has `children` instead of a type.
 */
type Element = { element: string; from?: string; repeats?: boolean } & ({ type: R4Type } | { children: Element[] });

const resourceTrigger: Element[] = [
  { element: 'description', type: 'markdown' },
  { element: 'resource', type: 'uri' },
  { element: 'supportedInteraction', type: 'code', repeats: true },
  {
    element: 'queryCriteria',
    children: [
      { element: 'previous', type: 'string' },
      { element: 'resultForCreate', type: 'code' },
      { element: 'current', type: 'string' },
      { element: 'resultForDelete', type: 'code' },
      { element: 'requireBoth', type: 'boolean' },
    ],
  },
  { element: 'fhirPathCriteria', type: 'string' },
];

const eventTrigger: Element[] = [
  { element: 'description', type: 'markdown' },
  { element: 'event', type: 'CodeableConcept' },
  { element: 'resource', type: 'uri' },
];

const canFilterBy: Element[] = [
  { element: 'description', type: 'markdown' },
  { element: 'resource', type: 'uri' },
  { element: 'filterParameter', type: 'string' },
  { element: 'filterDefinition', type: 'uri' },
  { element: 'comparator', type: 'code', repeats: true },
  { element: 'modifier', type: 'code', repeats: true },
];

const notificationShape: Element[] = [
  { element: 'resource', type: 'uri' },
  { element: 'include', type: 'string', repeats: true },
  { element: 'revInclude', type: 'string', repeats: true },
];

/**
 * The R5 SubscriptionTopic's elements carried as cross-version extensions, in
 * R5's order. Not here: url and status (topicAsBasic writes each twice),
 * identifier (Basic.identifier, which the cross-version profile leaves to
 * Basic's own element).
 */
const topicElements: Element[] = [
  { element: 'version', type: 'string' },
  { element: 'versionAlgorithm', from: 'versionAlgorithmString', type: 'string' },
  { element: 'versionAlgorithm', from: 'versionAlgorithmCoding', type: 'Coding' },
  { element: 'name', type: 'string' },
  { element: 'title', type: 'string' },
  { element: 'derivedFrom', type: 'canonical', repeats: true },
  { element: 'experimental', type: 'boolean' },
  { element: 'date', type: 'dateTime' },
  { element: 'publisher', type: 'string' },
  { element: 'contact', type: 'ContactDetail', repeats: true },
  { element: 'description', type: 'markdown' },
  { element: 'useContext', type: 'UsageContext', repeats: true },
  { element: 'jurisdiction', type: 'CodeableConcept', repeats: true },
  { element: 'purpose', type: 'markdown' },
  { element: 'copyright', type: 'markdown' },
  { element: 'copyrightLabel', type: 'string' },
  { element: 'approvalDate', type: 'date' },
  { element: 'lastReviewDate', type: 'date' },
  { element: 'effectivePeriod', type: 'Period' },
  { element: 'resourceTrigger', repeats: true, children: resourceTrigger },
  { element: 'eventTrigger', repeats: true, children: eventTrigger },
  { element: 'canFilterBy', repeats: true, children: canFilterBy },
  { element: 'notificationShape', repeats: true, children: notificationShape },
];

/**
 * The topic as the IG's R4 Basic: the service's id, and status `retired`
 * once the operator retired it (the definition's own status otherwise).
 */
export function topicAsBasic(topic: StoredTopic): Json {
  const definition = topic.definition as Json;
  const status = topic.status === 'retired' ? 'retired' : fitting(definition.status, 'code');
  // The canonical URL and the status twice: as the IG's example names them (the core artifact
  // extensions), and as the cross-version profile of meta.profile requires them (its own).
  const extension = [
    { url: topicOnR4.artifactUrl, valueUri: topic.url },
    { url: topicElement('url'), valueUri: topic.url },
    ...extensionsOf(definition, topicElements, topicElement),
    ...carriedExtensions(definition.extension),
  ];
  const statuses =
    status === undefined
      ? []
      : [
          { url: topicOnR4.artifactStatus, valueCode: status },
          { url: topicElement('status'), valueCode: status },
        ];
  const modifierExtension = [...statuses, ...carriedExtensions(definition.modifierExtension)];
  const identifier = repeats(definition.identifier)
    .map((item) => fitting(item, 'Identifier'))
    .filter((item) => item !== undefined);
  return withoutEmpty({
    resourceType: 'Basic',
    id: topic.id,
    meta: { profile: [topicOnR4.profile] },
    implicitRules: fitting(definition.implicitRules, 'uri'),
    language: fitting(definition.language, 'code'),
    text: narrative(definition.text),
    extension,
    modifierExtension,
    identifier,
    code: { coding: [{ ...topicOnR4.code }] },
  }) as Json;
}

/** The extensions of `source`'s elements, in the order of `elements`, each url made by `urlOf`. */
function extensionsOf(source: Json, elements: Element[], urlOf: (element: string) => string): Json[] {
  return elements.flatMap((spec) => {
    const given = source[spec.from ?? spec.element];
    const values = spec.repeats === true ? repeats(given) : [given];
    return values.flatMap((value) => {
      if ('children' in spec) {
        const children = isObject(value) ? extensionsOf(value, spec.children, (element) => element) : [];
        return children.length === 0 ? [] : [{ url: urlOf(spec.element), extension: children }];
      }
      const typed = fitting(value, spec.type);
      return typed === undefined ? [] : [{ url: urlOf(spec.element), [`value${spec.type[0]!.toUpperCase()}${spec.type.slice(1)}`]: typed }];
    });
  });
}

const codePattern = /^[^\s]+( [^\s]+)*$/;
const uriPattern = /^\S+$/;
// R4's own patterns for date and dateTime.
const year = '([0-9]([0-9]([0-9][1-9]|[1-9]0)|[1-9]00)|[1-9]000)';
const datePattern = new RegExp(`^${year}(-(0[1-9]|1[0-2])(-(0[1-9]|[1-2][0-9]|3[0-1]))?)?$`);
const dateTimePattern = new RegExp(
  `^${year}(-(0[1-9]|1[0-2])(-(0[1-9]|[1-2][0-9]|3[0-1])(T([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?(Z|(\\+|-)((0[0-9]|1[0-3]):[0-5][0-9]|14:00)))?)?)?$`,
);

/** The value as its R4 type, or undefined when it does not fit (or is empty). */
function fitting(value: unknown, type: R4Type): unknown {
  switch (type) {
    case 'string':
    case 'markdown':
      return typeof value === 'string' && value.trim() !== '' ? value : undefined;
    case 'uri':
    case 'canonical':
      return typeof value === 'string' && uriPattern.test(value) ? value : undefined;
    case 'code':
      return typeof value === 'string' && codePattern.test(value) ? value : undefined;
    case 'boolean':
      return typeof value === 'boolean' ? value : undefined;
    case 'date':
      return typeof value === 'string' && datePattern.test(value) ? value : undefined;
    case 'dateTime':
      return typeof value === 'string' && dateTimePattern.test(value) ? value : undefined;
    default:
      // A complex type, carried as given (R5's are R4's for these), without its empty parts.
      return isObject(value) ? withoutEmpty(value) : undefined;
  }
}

/** The topic's narrative, which Basic (a DomainResource) carries as its own. */
function narrative(text: unknown): unknown {
  return isObject(text) && fitting(text.status, 'code') !== undefined && typeof text.div === 'string' ? withoutEmpty(text) : undefined;
}

/** The value types an R4 Extension may have (Extension.value[x]). */
const r4ExtensionValueTypes = new Set([
  'Base64Binary',
  'Boolean',
  'Canonical',
  'Code',
  'Date',
  'DateTime',
  'Decimal',
  'Id',
  'Instant',
  'Integer',
  'Markdown',
  'Oid',
  'PositiveInt',
  'String',
  'Time',
  'UnsignedInt',
  'Uri',
  'Url',
  'Uuid',
  'Address',
  'Age',
  'Annotation',
  'Attachment',
  'CodeableConcept',
  'Coding',
  'ContactPoint',
  'Count',
  'Distance',
  'Duration',
  'HumanName',
  'Identifier',
  'Money',
  'Period',
  'Quantity',
  'Range',
  'Ratio',
  'Reference',
  'SampledData',
  'Signature',
  'Timing',
  'ContactDetail',
  'Contributor',
  'DataRequirement',
  'Expression',
  'ParameterDefinition',
  'RelatedArtifact',
  'TriggerDefinition',
  'UsageContext',
  'Dosage',
  'Meta',
]);

/** Whose urls this module writes: the topic's own extension of the same url would say the same thing twice, or contradict it. */
const ownUrls = (url: string) => url === topicOnR4.artifactUrl || url === topicOnR4.artifactStatus || url.startsWith(topicElement(''));

/** The topic's own (modifier) extensions that R4 can carry: whole, with one R4 value or sub-extensions, and nothing else. */
function carriedExtensions(given: unknown): Json[] {
  return repeats(given).flatMap((item) => {
    const carried = r4Extension(item);
    return carried === undefined || ownUrls(carried.url as string) ? [] : [carried];
  });
}

function r4Extension(item: unknown): Json | undefined {
  if (!isObject(item) || fitting(item.url, 'uri') === undefined) return undefined;
  const valueKeys = Object.keys(item).filter((key) => key.startsWith('value'));
  if (valueKeys.length > 1 || Object.keys(item).some((key) => !['url', 'id', 'extension'].includes(key) && !key.startsWith('value'))) return undefined;
  if (valueKeys.length === 1 && !r4ExtensionValueTypes.has(valueKeys[0]!.slice('value'.length))) return undefined;
  const children = repeats(item.extension).map(r4Extension);
  if (children.includes(undefined)) return undefined;
  const carried = withoutEmpty({ ...item, extension: children }) as Json | undefined;
  // An extension has a value or sub-extensions, not both, not neither (ext-1).
  return carried !== undefined && Object.keys(carried).some((key) => key.startsWith('value')) !== (carried.extension !== undefined) ? carried : undefined;
}

/** A repeating element's items (none unless it is an array). */
function repeats(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

function isObject(value: unknown): value is Json {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/**
 * The value without what FHIR JSON forbids: empty arrays, objects and
 * strings, and nulls (undefined when nothing is left).
 */
function withoutEmpty(value: unknown): unknown {
  if (Array.isArray(value)) {
    const items = value.map(withoutEmpty).filter((item) => item !== undefined);
    return items.length === 0 ? undefined : items;
  }
  if (isObject(value)) {
    const entries = Object.entries(value).flatMap(([key, item]) => {
      const kept = withoutEmpty(item);
      return kept === undefined ? [] : [[key, kept] as const];
    });
    return entries.length === 0 ? undefined : Object.fromEntries(entries);
  }
  if (value === null || value === undefined || (typeof value === 'string' && value.trim() === '')) return undefined;
  return value;
}
