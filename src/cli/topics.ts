import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import type { TopicTrigger } from '../topics/compile.ts';
import { describeError } from '../config/logger.ts';
import { CommandError, withDatabase } from './command.ts';
import { table } from './text.ts';

/** The topics' modules, loaded when one of this group's commands runs (src/cli/main.ts says why). */
const topicStore = () =>
  Promise.all([import('../topics/store.ts'), import('../topics/definition.ts')]).then(([store, definition]) => ({ ...store, ...definition }));

/** `topics add | list | retire | explain`. */
export function registerTopicsCommands(program: Command): void {
  const topics = program
    .command('topics')
    .description('topics for topic-based subscriptions (FHIR R5 SubscriptionTopic, as the Subscriptions Backport IG uses them)');
  topics
    .command('add')
    .description(
      'add SubscriptionTopic definitions (JSON files, each a SubscriptionTopic or a Bundle of them), all or none; the same definition again changes nothing',
    )
    .argument('<files...>', 'JSON files')
    .action((files: string[]) =>
      withDatabase(async ({ db }) => {
        const { addTopics, canonicalOf, TopicRefused } = await topicStore();
        const definitions = (await Promise.all(files.map(readTopicFile))).flat();
        let added;
        try {
          added = await addTopics(
            db,
            definitions.map(({ json }) => json),
          );
        } catch (error) {
          if (!(error instanceof TopicRefused)) throw error;
          const source = error.index === undefined ? '' : ` ${definitions[error.index]!.source}`;
          throw new CommandError(`Refused${source}, nothing added: ${error.message}`, 2);
        }
        for (const topic of added) {
          console.log(
            `${topic.outcome === 'added' ? 'Added' : 'Unchanged'} ${canonicalOf(topic.url, topic.version)}${topic.status === 'retired' ? ' (retired: a retired version stays retired; add a new one)' : ''}`,
          );
        }
      }),
    );
  topics
    .command('list')
    .description('list the topics: canonical URL and version, status, the resources they trigger on, title')
    .action(() =>
      withDatabase(async ({ db }) => {
        const { listTopics, canonicalOf } = await topicStore();
        const rows = (await listTopics(db)).map((topic) => [
          canonicalOf(topic.url, topic.version),
          topic.status,
          [...new Set(topic.compiled.triggers.map((trigger) => trigger.resourceType))].join(','),
          topic.title ?? '',
        ]);
        console.log(rows.length === 0 ? 'No topics.' : table(['TOPIC', 'STATUS', 'RESOURCES', 'TITLE'], rows));
      }),
    );
  topics
    .command('retire')
    .description('retire a topic (every version of URL, or URL|version): no new subscriptions on it; those that exist keep working')
    .argument('<canonical>', 'the topic, as topics list shows it')
    .action((canonical: string) =>
      withDatabase(async ({ db }) => {
        const { retireTopic } = await topicStore();
        const retired = await retireTopic(db, canonical);
        if (retired.length === 0) throw new CommandError(`No active topic is ${canonical} (topics list shows them).`);
        for (const topic of retired) console.log(`Retired ${topic}`);
      }),
    );
  topics
    .command('explain')
    .description(
      "show what a topic's triggers compile to: the jsonpath of its queryCriteria and the SQL of its fhirPathCriteria, as the notification trigger evaluates them",
    )
    .argument('<canonical>', 'the topic, as topics list shows it')
    .action((canonical: string) =>
      withDatabase(async ({ db }) => {
        const { findTopic, canonicalOf } = await topicStore();
        const topic = await findTopic(db, canonical);
        if (topic === undefined) throw new CommandError(`No topic is ${canonical} (topics list shows them).`);
        console.log(explainTopic(canonicalOf(topic.url, topic.version), topic.compiled.triggers));
      }),
    );
}

/** A topic's triggers as the notification trigger evaluates them, for a DBA to read. */
function explainTopic(canonical: string, triggers: TopicTrigger[]): string {
  return triggers
    .map((trigger, index) => {
      const lines = [`${canonical} resourceTrigger[${index}]: ${trigger.resourceType}, on ${trigger.interactions.join(', ')}`];
      for (const name of ['previous', 'current'] as const) {
        const test = trigger[name];
        if (test !== null)
          lines.push(`  queryCriteria.${name}: ${test.criteria}`, `    jsonpath: ${test.match ?? `(none: every ${trigger.resourceType} passes)`}`);
      }
      if (trigger.fhirPath !== null) {
        lines.push(`  fhirPathCriteria: ${trigger.fhirPath.expression}`, '    SQL, over the versions previous and current (NULL where there is none):');
        lines.push(...trigger.fhirPath.sql.split('\n').map((line) => `      ${line.trim()}`));
      }
      if (trigger.previous === null && trigger.current === null && trigger.fhirPath === null) lines.push('  no criteria: fires on every such write');
      return lines.join('\n');
    })
    .join('\n\n');
}

/** The SubscriptionTopics of a JSON file (one, or a Bundle's entries), each with where it came from for a refusal. */
async function readTopicFile(file: string): Promise<{ json: unknown; source: string }[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new CommandError(`Cannot read ${file}: ${describeError(error)}`, 2);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new CommandError(`${file} is not JSON: ${describeError(error)}`, 2);
  }
  const bundle = json as { resourceType?: unknown; entry?: { resource?: unknown }[] };
  if (bundle.resourceType !== 'Bundle') return [{ json, source: file }];
  return (bundle.entry ?? []).map((entry, index) => ({ json: entry.resource, source: `${file} (Bundle.entry[${index}])` }));
}
