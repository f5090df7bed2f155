import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { compileTopic } from '../src/topics/compile.ts';
import { parseSubscriptionTopic, TopicRefused } from '../src/topics/definition.ts';
import { addTopics, listTopics, retireTopic } from '../src/topics/store.ts';
import { childEnvironment, runCommand } from './support/commands.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';

/** Topics (src/topics/): SubscriptionTopic definitions checked, compiled to SQL, stored, listed and retired. */

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

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database.drop());
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
      (await database.pool.query<{ passes: boolean }>(`SELECT jsonb_path_match($1::jsonb, $2::jsonpath) AS passes`, [JSON.stringify({ resourceType: 'Encounter', status }), match])).rows[0]!.passes;
    expect(await evaluate(previous!.match!, 'in-progress')).toBe(true);
    expect(await evaluate(previous!.match!, 'finished')).toBe(false);
    expect(await evaluate(current!.match!, 'finished')).toBe(true);
    expect(await evaluate(current!.match!, 'in-progress')).toBe(false);
  });

  it('takes a resource type by name, every interaction when none is listed, and a trigger without criteria', () => {
    const compiled = compileTopic(parseSubscriptionTopic(encounterComplete(trigger({ resource: 'Encounter', supportedInteraction: undefined, queryCriteria: undefined }))));
    expect(compiled.triggers[0]).toMatchObject({ resourceType: 'Encounter', interactions: ['create', 'update', 'delete'], previous: null, current: null, requireBoth: false });
  });

  it.each([
    ['SubscriptionTopic.resourceType: ', { resourceType: 'Subscription' }],
    ['SubscriptionTopic.url: ', { url: 'not a url' }],
    ['SubscriptionTopic.status: a topic added is draft or active, not retired', { status: 'retired' }],
    ['SubscriptionTopic.resourceTrigger: ', { resourceTrigger: [] }],
    ['SubscriptionTopic.eventTrigger: event triggers (messages and operations) are not supported', { eventTrigger: [{ event: { text: 'admit' } }] }],
    ['SubscriptionTopic.resourceTrigger[0].fhirPathCriteria: FHIRPath criteria are not evaluated', trigger({ fhirPathCriteria: "%current.status = 'finished'" })],
    ["SubscriptionTopic.resourceTrigger[0].resource: 'Encountre' is not an R4 resource type", trigger({ resource: 'Encountre' })],
    ['profiles are not supported', trigger({ resource: 'http://example.org/StructureDefinition/my-encounter' })],
    ['SubscriptionTopic.resourceTrigger[0].supportedInteraction[0]: ', trigger({ supportedInteraction: ['read'] })],
    ["SubscriptionTopic.resourceTrigger[0].queryCriteria.current: Unknown search parameter 'staus' for Encounter", trigger({ queryCriteria: { current: 'staus=finished' } })],
    ['SubscriptionTopic.resourceTrigger[0].queryCriteria.current: chained parameters and _has are not supported', trigger({ queryCriteria: { current: 'subject.name=Smith' } })],
    ['_include and _revinclude belong in notificationShape', trigger({ queryCriteria: { current: 'status=finished&_include=Encounter:patient' } })],
    ['SubscriptionTopic.resourceTrigger[0].queryCriteria.resultForCreate: required with previous criteria on a trigger for create', trigger({ queryCriteria: { previous: 'status:not=finished', current: 'status=finished' } })],
    ['SubscriptionTopic.resourceTrigger[0].queryCriteria.resultForDelete: required with current criteria on a trigger for delete', trigger({ supportedInteraction: ['delete'], queryCriteria: { current: 'status=finished' } })],
    ["SubscriptionTopic.canFilterBy[0].filterParameter: Encounter has no search parameter 'patiant'", { canFilterBy: [{ filterParameter: 'patiant' }] }],
    ["SubscriptionTopic.canFilterBy[0].modifier: 'above' is not a modifier this service supports on Encounter.status", { canFilterBy: [{ filterParameter: 'status', modifier: ['above'] }] }],
    ['SubscriptionTopic.canFilterBy[0].comparator: comparators other than eq apply to date, number and quantity parameters', { canFilterBy: [{ filterParameter: 'status', comparator: ['gt'] }] }],
    ['SubscriptionTopic.canFilterBy[0].filterDefinition: custom SearchParameter definitions are not supported', { canFilterBy: [{ filterParameter: 'patient', filterDefinition: 'http://example.org/SearchParameter/x' }] }],
    ["SubscriptionTopic.notificationShape[0].include[0]: _include=Encounter:patient&iterate=Patient.link: Encounter has no search parameter 'patient&iterate", { notificationShape: [{ resource: 'Encounter', include: ['Encounter:patient&iterate=Patient.link'] }] }],
  ])('is refused: %s', (expected, changes) => {
    expect(refusal(encounterComplete(changes))).toContain(expected);
  });

  it('asks which resource a filter is on when the topic triggers on several', () => {
    const twoResources = encounterComplete({
      resourceTrigger: [...(encounterComplete().resourceTrigger as object[]), { resource: 'Observation', supportedInteraction: ['create'] }],
      canFilterBy: [{ filterParameter: 'patient' }],
    });
    expect(refusal(twoResources)).toBe('SubscriptionTopic.canFilterBy[0].resource: required when the topic has triggers on several resources (Encounter, Observation)');
  });
});

describe('stored topics', () => {
  it('are added once per URL and version: the same definition again changes nothing, a different one is refused', async () => {
    expect(await addTopics(database.db, [encounterComplete()])).toEqual([{ outcome: 'added', url: 'http://example.org/topics/encounter-complete', version: '1.0.0', status: 'active' }]);
    // Keys in another order are the same definition.
    const reordered = Object.fromEntries(Object.entries(encounterComplete()).reverse());
    expect(await addTopics(database.db, [reordered])).toEqual([{ outcome: 'unchanged', url: 'http://example.org/topics/encounter-complete', version: '1.0.0', status: 'active' }]);
    await expect(addTopics(database.db, [encounterComplete({ title: 'Changed' })])).rejects.toThrow(
      'SubscriptionTopic.version: http://example.org/topics/encounter-complete|1.0.0 is already defined differently: a changed topic needs a new version',
    );
    expect(await addTopics(database.db, [encounterComplete({ title: 'Changed', version: '1.1.0' })])).toEqual([expect.objectContaining({ outcome: 'added', version: '1.1.0' })]);
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
    const refused = await addTopics(database.db, [encounterComplete(), encounterComplete({ url: 'http://example.org/topics/other', status: 'unknown' })]).catch((error: unknown) => error);
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
  it('adds (the example of docs/topics.md), lists and retires topics; a definition refused exits 2 naming the file and the element, and adds nothing', { timeout: 60_000 }, async () => {
    const folder = await mkdtemp(path.join(tmpdir(), 'topics-'));
    // The example docs/topics.md adds, by the same relative path.
    const good = 'examples/topics/encounter-complete.json';
    const bundle = path.join(folder, 'bundle.json');
    await writeFile(bundle, JSON.stringify({ resourceType: 'Bundle', type: 'collection', entry: [{ resource: encounterComplete({ version: '2' }) }, { resource: encounterComplete(trigger({ resource: 'Encountre' })) }] }));
    const cli = (...args: string[]) => runCommand('npm', ['run', '--silent', 'cli', '--', 'topics', ...args], childEnvironment({ DATABASE_URL: database.url }));

    const refused = await cli('add', good, bundle);
    expect(refused).toEqual({
      exitCode: 2,
      output: `Refused ${bundle} (Bundle.entry[1]), nothing added: SubscriptionTopic.resourceTrigger[0].resource: 'Encountre' is not an R4 resource type (or its StructureDefinition URL); profiles are not supported\n`,
    });
    expect(await cli('list')).toEqual({ exitCode: 0, output: 'No topics.\n' });
    expect(await cli('add', good)).toEqual({ exitCode: 0, output: 'Added http://example.org/topics/encounter-complete|1.0.0\n' });
    expect(await cli('add', good)).toEqual({ exitCode: 0, output: 'Unchanged http://example.org/topics/encounter-complete|1.0.0\n' });
    expect((await cli('list')).output).toMatch(/^TOPIC +STATUS +RESOURCES +TITLE\nhttp:\/\/example\.org\/topics\/encounter-complete\|1\.0\.0 +active +Encounter +Encounter complete\n$/);
    expect(await cli('retire', 'http://example.org/topics/encounter-complete')).toEqual({ exitCode: 0, output: 'Retired http://example.org/topics/encounter-complete|1.0.0\n' });
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
  });
});
