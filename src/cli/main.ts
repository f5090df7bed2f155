import { spawn } from 'node:child_process';
import { constants as fsConstants } from 'node:fs';
import { access, readFile, stat } from 'node:fs/promises';
import { constants, userInfo } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Presets, SingleBar } from 'cli-progress';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import type { Logger } from 'pino';
import { z } from 'zod';
import { apiKeyScopes, createApiKey, listApiKeys, revokeApiKey, setApiKeyScopes, type ApiKeyScope } from '../auth/api-keys.ts';
import { ConfigError, loadConfig, maxSecretRotationOverlapSeconds, type Config } from '../config/index.ts';
import { createLogger, describeError } from '../config/logger.ts';
import type { Db } from '../db/database.ts';
import { subscriptionStatuses, type SubscriptionStatus } from '../db/schema.ts';
import { formatInstant } from '../fhir/instant.ts';
import { FhirError } from '../fhir/outcome.ts';
import type { LoadProgress } from '../loading/ndjson.ts';
import type { Attempt } from '../operations/delivery-overview.ts';
import { appliedSummary } from '../db/migrations.ts';
import { databaseServer, migrate, openDatabase } from '../db/open.ts';
import type { Roles } from '../service.ts';
import type { ResendSelection } from '../subscriptions/resend.ts';

/**
 * Each command's own modules, loaded when it runs: a one-shot command (a
 * load above all) starts without the code of the others, nor the API's and
 * the dispatcher's (src/service.ts, loaded by serve).
 */
const loading = () => import('../loading/ndjson.ts');
const overview = () => import('../operations/delivery-overview.ts');
const topicStore = () => Promise.all([import('../topics/store.ts'), import('../topics/definition.ts')]).then(([store, definition]) => ({ ...store, ...definition }));
const reactivating = () => import('../subscriptions/reactivation-requests.ts');

const rotating = () =>
  Promise.all([import('../subscriptions/rotation.ts'), import('../subscriptions/secrets.ts'), import('../subscriptions/requests.ts')]).then(([rotation, secrets, requests]) => ({
    ...rotation,
    ...secrets,
    ...requests,
  }));

const resending = () => Promise.all([import('../subscriptions/resend.ts'), import('../subscriptions/requests.ts')]).then(([resend, requests]) => ({ ...resend, ...requests }));

/**
 * The widest a column is padded to: a longer value (a topic with its filters, an endpoint with its
 * query) runs past its column on its own line rather than widening every line.
 */
const maxColumnWidth = 60;

/** A command that failed for a reason it prints; exit status 1, or 2 for input refused (as commander's usage errors). */
class CommandError extends Error {
  readonly exitCode: 1 | 2;
  constructor(message: string, exitCode: 1 | 2 = 1) {
    super(message);
    this.exitCode = exitCode;
  }
}

/**
 * The command line (commander: per-command --help, `help <command>`, usage
 * errors). Everything it prints for people is plain text; only the serving
 * commands log, as JSON lines or, on a terminal, one readable line per event.
 */
function commandLine(): Command {
  const program = new Command('npm run cli --')
    .description('FHIR R4 webhook subscription service. Without DATABASE_URL every command uses the embedded PostgreSQL in EMBEDDED_DATA_DIR.')
    .enablePositionalOptions()
    .showHelpAfterError()
    .exitOverride();

  program
    .command('serve')
    .description("the HTTP API and the dispatcher's workers (what npm start runs)")
    .action(() => serve({ api: true, workers: true }));
  program.command('api').description('the HTTP API only').action(() => serve({ api: true, workers: false }));
  program.command('worker').description("the dispatcher's workers only; run as many as you like on one database").action(() => serve({ api: false, workers: true }));

  program
    .command('migrate')
    .description('apply pending database migrations and exit')
    .action(async () => {
      const { config, logger } = oneShot();
      const server = await databaseServer(config, logger);
      try {
        const applied = await migrate(server.url, logger);
        console.log(applied.length === 0 ? 'The database is up to date.' : `Applied ${appliedSummary(applied)}.`);
      } finally {
        await server.release();
      }
    });

  const apiKey = program.command('api-key').description('create, list and revoke API keys');
  apiKey
    .command('create')
    .description('create an API key and print it once (only its hash is stored)')
    .requiredOption('--name <name>', 'who or what the key is for')
    .option(
      '--scopes <scopes>',
      'comma list of read (GET, searches), write (creates, updates, deletes, Bundles, subscriptions), admin (every subscription, not only its own)',
      'read,write',
    )
    .action((options: { name: string; scopes: string }) =>
      withDatabase(async ({ db }) => {
        const scopes = parseScopes(options.scopes);
        const { id, key } = await createApiKey(db, options.name, scopes);
        console.log(`Created API key ${id} (${options.name}, scopes ${scopes.join(', ')}).\nAPI key: ${key}\nIt is stored only as a hash: keep it now.`);
      }),
    );
  apiKey
    .command('set-scopes')
    .description("give a key other scopes, the key itself unchanged (its subscriptions stay its own): e.g. read,write for a client's key made before scopes existed, which holds admin")
    .argument('<id>', "the key's id, as api-key list shows it")
    .argument('<scopes>', 'comma list of read, write, admin')
    .action((id: string, scopesText: string) =>
      withDatabase(async ({ db }) => {
        const scopes = parseScopes(scopesText);
        if (!z.uuid().safeParse(id).success) throw new CommandError(`'${id}' is not an API key id (a UUID, as api-key list shows it).`, 2);
        if (!(await setApiKeyScopes(db, id, scopes))) throw new CommandError(`No active API key has id ${id}.`);
        console.log(`API key ${id} now has the scopes ${scopes.join(', ')}.`);
      }),
    );
  apiKey
    .command('list')
    .description('list API keys: id, creation time, state and name (the keys themselves are never stored)')
    .action(() =>
      withDatabase(async ({ db }) => {
        const rows = (await listApiKeys(db)).map((key) => [
          key.id,
          key.createdAt.toISOString(),
          key.revokedAt ? `revoked ${key.revokedAt.toISOString()}` : 'active',
          key.scopes.join(','),
          key.name,
        ]);
        console.log(rows.length === 0 ? 'No API keys.' : table(['ID', 'CREATED', 'STATE', 'SCOPES', 'NAME'], rows));
      }),
    );
  apiKey
    .command('revoke')
    .description('revoke an API key; it stops working at the next request')
    .argument('<id>', "the key's id, as api-key list shows it")
    .action((id: string) =>
      withDatabase(async ({ db }) => {
        const parsed = z.uuid().safeParse(id);
        if (!parsed.success) throw new CommandError(`'${id}' is not an API key id (a UUID, as api-key list shows it).`);
        if (!(await revokeApiKey(db, parsed.data))) throw new CommandError(`No active API key has id ${parsed.data}.`);
        console.log(`Revoked API key ${parsed.data}.`);
      }),
    );

  program
    .command('load')
    .description('load FHIR Bulk Data NDJSON files (.ndjson, .ndjson.gz) into the store, a transaction per chunk: a committed chunk notifies its subscribers, a failed one nobody')
    .argument('<files...>', 'NDJSON files, one resource per line, any mix of types')
    .option('--chunk-size <n>', 'resources per transaction', parsePositiveInteger, 1000)
    .option('--dry-run', 'check every line and report, write nothing')
    .action((files: string[], options: { chunkSize: number; dryRun?: boolean }) =>
      withDatabase((database) => load(database.db, files, { chunkSize: options.chunkSize, dryRun: options.dryRun === true })),
    );

  const subscriptions = program.command('subscriptions').description('the subscriptions: their state, their calls, what is queued');
  subscriptions
    .command('list')
    .description(`list the subscriptions: id, status, failed calls since the last success, deactivations in the last 24 hours (more than one: a flapping subscriber), the last success, criteria (a topic with its filters and payload level), endpoint (credentials masked), error; a value over ${maxColumnWidth} characters runs past its column on its own line`)
    .option('--status <statuses>', 'only these: a comma list of requested, active, error, off', parseStatuses)
    .action((options: { status?: SubscriptionStatus[] }) =>
      withDatabase(async ({ db }) => {
        const { listSubscriptions, subscribedTo } = await overview();
        const rows = (await listSubscriptions(db, options)).map((row) => [
          row.id,
          row.status,
          String(row.failedCallsSinceSuccess),
          String(row.deactivationsLastDay),
          row.lastSuccessAt?.toISOString() ?? 'never',
          subscribedTo(row),
          row.endpoint,
          row.error ?? '',
        ]);
        console.log(rows.length === 0 ? 'No subscriptions.' : table(['ID', 'STATUS', 'FAILED CALLS SINCE SUCCESS', 'DEACTIVATIONS 24H', 'LAST SUCCESS', 'CRITERIA', 'ENDPOINT', 'ERROR'], rows));
      }),
    );
  subscriptions
    .command('show')
    .description('one subscription: its state, its last 20 calls and what is queued for it')
    .argument('<id>', "the subscription's id")
    .action((id: string) =>
      withDatabase(async ({ db }) => {
        const { findSubscription, queuedWork, recentAttempts } = await overview();
        const subscription = z.uuid().safeParse(id).success ? await findSubscription(db, id) : undefined;
        if (subscription === undefined) throw new CommandError(`No subscription has id '${id}' (subscriptions list shows them).`);
        console.log(
          [
            `Subscription ${subscription.id}`,
            `  status    ${subscription.status}${subscription.error === null ? '' : `: ${subscription.error}`}`,
            `  criteria  ${subscription.criteria}`,
            ...(subscription.topic === null
              ? []
              : [
                  `  filters   ${subscription.topic.filters.length === 0 ? 'none' : subscription.topic.filters.join(' & ')}`,
                  `  payload   ${subscription.topic.payloadContent}`,
                  `  events    ${subscription.topic.lastEventNumber} (the latest event's number)`,
                ]),
            `  endpoint  ${subscription.endpoint}`,
            `  failed    ${plural(subscription.failedCallsSinceSuccess, 'call')} since the last success (${subscription.lastSuccessAt?.toISOString() ?? 'none yet'}); ${plural(subscription.failureCount, 'event')} refused for good in a row`,
            `  in error  ${plural(subscription.deactivationsLastDay, 'time')} in the last 24 hours, ${subscription.deactivationsInARow} in a row without a delivery${subscription.deactivationsLastDay > 1 ? ' (flapping: its handshakes pass, its notifications fail; its contacts get one alert per ALERT_EMAIL_INTERVAL_SECONDS)' : ''}`,
            ...(subscription.status === 'error' ? [`  next      ${nextReactivation(subscription)}`] : []),
            `  created   ${subscription.createdAt.toISOString()}`,
          ].join('\n'),
        );
        const calls = await recentAttempts(db, subscription.id);
        // CALL and EVENT are what `deliveries resend --attempt` and `--event` take.
        console.log(`\nLast calls (newest first):\n${calls.length === 0 ? '  none' : table(['STARTED', 'CALL', 'KIND', 'EVENT', 'RESOURCE', 'ATTEMPT', 'OUTCOME', 'HTTP', 'MS', 'ERROR', 'ANSWER'], calls.map(attemptCells))}`);
        const queued = await queuedWork(db, subscription.id);
        const queuedRows = queued.map((work) => [work.task, String(work.items), String(work.waiting), String(work.scheduled), String(work.running), work.waitingSince?.toISOString() ?? '', work.nextRunAt?.toISOString() ?? '']);
        console.log(`\nQueued:\n${queued.length === 0 ? '  nothing' : table(['WORK', 'ITEMS', 'WAITING', 'SCHEDULED', 'RUNNING', 'WAITING SINCE', 'NEXT RUN'], queuedRows)}`);
      }),
    );

  subscriptions
    .command('reactivate')
    .description(
      'have the running service send a subscription in error its reactivation handshake now, its receiver fixed: on 2xx it is active (the events it missed are not sent). ' +
        "One of the service's workers sends it, with the service's settings; this command only needs the service's database",
    )
    .argument('<id>', "the subscription's id")
    .option('--wait <seconds>', "how long to wait for one of the service's workers to take the request (else nothing is sent)", parseWaitSeconds, 10)
    .action((id: string, options: { wait: number }) => reactivate(id, options));

  subscriptions
    .command('rotate-secret')
    .description(
      'give a subscription a new signing secret, read from standard input (a command line is shown by ps and kept in shell history): for the overlap, ' +
        'every call is signed with the previous secret too, then with the new one only (docs/operators.md). Recorded with your user name, never the secret. ' +
        "Run it with the service's SECRETS_ENCRYPTION_KEY",
    )
    .argument('<id>', "the subscription's id")
    .option('--overlap-seconds <seconds>', `how long the previous secret signs calls too, 0 to ${maxSecretRotationOverlapSeconds} (default: SECRET_ROTATION_OVERLAP_SECONDS, a day)`, parseOverlapSeconds)
    .action((id: string, options: { overlapSeconds?: number }) => rotateSecret(id, options));

  subscriptions
    .command('switch-off')
    .description(
      "switch a subscription off by its id, whichever API key created it (a client switches off only its own, by criteria): it becomes off, with end set, and is never called again",
    )
    .argument('<id>', "the subscription's id")
    .action((id: string) => switchOff(id));

  const topics = program.command('topics').description('topics for topic-based subscriptions (FHIR R5 SubscriptionTopic, as the Subscriptions Backport IG uses them)');
  topics
    .command('add')
    .description('add SubscriptionTopic definitions (JSON files, each a SubscriptionTopic or a Bundle of them), all or none; the same definition again changes nothing')
    .argument('<files...>', 'JSON files')
    .action((files: string[]) =>
      withDatabase(async ({ db }) => {
        const { addTopics, canonicalOf, TopicRefused } = await topicStore();
        const definitions = (await Promise.all(files.map(readTopicFile))).flat();
        let added;
        try {
          added = await addTopics(db, definitions.map(({ json }) => json));
        } catch (error) {
          if (!(error instanceof TopicRefused)) throw error;
          const source = error.index === undefined ? '' : ` ${definitions[error.index]!.source}`;
          throw new CommandError(`Refused${source}, nothing added: ${error.message}`, 2);
        }
        for (const topic of added) {
          console.log(`${topic.outcome === 'added' ? 'Added' : 'Unchanged'} ${canonicalOf(topic.url, topic.version)}${topic.status === 'retired' ? ' (retired: a retired version stays retired; add a new one)' : ''}`);
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

  const deliveries = program.command('deliveries').description('calls to subscribers');
  deliveries
    .command('tail')
    .description('print the calls to subscribers as they are recorded, until Ctrl-C')
    .option('--subscription <id>', "only this subscription's calls")
    .action((options: { subscription?: string }) => withDatabase((database) => tailDeliveries(database.db, options.subscription)));
  deliveries
    .command('resend')
    .description('send recorded events of an active subscription again (same event number, version and webhook-id): one event, or every event failed for good since an instant')
    .argument('<subscription-id>', "the subscription's id")
    .addOption(new Option('--event <number>', "the event with this number (the EVENT column of subscriptions show, or deliveries tail's 'event N')").conflicts(['attempt', 'failedSince']))
    .addOption(new Option('--attempt <id>', "the event of this recorded call (the CALL column of subscriptions show, or deliveries tail's 'call N'; webhook.delivery_attempts.id)").conflicts(['failedSince']))
    .option('--failed-since <instant>', 'every event that failed for good since this instant (ISO 8601, e.g. 2026-11-25T09:00:00Z)')
    .action((id: string, options: { event?: string; attempt?: string; failedSince?: string }) => withDatabase((database) => resend(database.db, id, options)));

  program
    .command('psql')
    .description(`open psql on the service's database (arguments after psql go to psql, e.g. psql -c "select 1")`)
    .argument('[psql-arguments...]')
    .passThroughOptions()
    .allowUnknownOption()
    .action((args: string[]) => psql(args));

  return program;
}

/** `deliveries resend`: queues the events asked for, and prints what was queued and what was not, and why. */
async function resend(db: Db, subscriptionId: string, options: { event?: string; attempt?: string; failedSince?: string }): Promise<void> {
  let selection: ResendSelection;
  if (options.event !== undefined) {
    if (!/^[1-9]\d{0,14}$/.test(options.event)) throw new CommandError(`--event takes an event number, not '${options.event}'.`, 2);
    selection = { eventNumber: Number(options.event) };
  } else if (options.attempt !== undefined) {
    selection = { attemptId: options.attempt };
  } else if (options.failedSince !== undefined) {
    const since = new Date(options.failedSince);
    if (Number.isNaN(since.getTime())) throw new CommandError(`--failed-since takes an instant such as 2026-11-25T09:00:00Z, not '${options.failedSince}'.`, 2);
    selection = { failedSince: since };
  } else {
    throw new CommandError('Say which events: --event <number>, --attempt <id> or --failed-since <instant>.', 2);
  }
  const { resendEvents, refusalReason, nothingToResend } = await resending();
  let outcome;
  try {
    outcome = await resendEvents(db, subscriptionId, selection);
  } catch (error) {
    if (error instanceof FhirError) throw new CommandError(`Not resent: ${refusalReason(error)}.`);
    throw error;
  }
  const line = (event: { eventNumber: number | null; resource: string }) => `${event.eventNumber === null ? '' : `event ${event.eventNumber} `}${event.resource}`;
  for (const event of outcome.queued) console.log(`Queued ${line(event)}`);
  for (const event of outcome.skipped) console.log(`Skipped ${line(event)}: ${event.reason}`);
  if (outcome.queued.length === 0 && outcome.skipped.length === 0) console.log(`${nothingToResend}.`);
}

/** When an event may reactivate a subscription in error: the next one, or one after the flapping backoff (webhook.reactivation_backoff). */
function nextReactivation({ reactivationHeldUntil, deactivationsInARow }: { reactivationHeldUntil: Date | null; deactivationsInARow: number }): string {
  if (reactivationHeldUntil === null) return 'the next matching event may reactivate it (subscriptions reactivate does it now)';
  return `an event from ${reactivationHeldUntil.toISOString()} on may reactivate it (flapping: ${deactivationsInARow} deactivations in a row without a delivery)`;
}

/**
 * `subscriptions reactivate`: asks the running service, whose worker sends the
 * handshake as $reactivate does (src/subscriptions/reactivation-requests.ts),
 * and prints what became of it. Exits 1 when the subscription is not in
 * error, the handshake failed, or no worker took or answered the request.
 */
async function reactivate(id: string, { wait }: { wait: number }): Promise<void> {
  if (!z.uuid().safeParse(id).success) throw new CommandError(`'${id}' is not a subscription id (a UUID, as subscriptions list shows it).`, 2);
  const { reactivateThroughService } = await reactivating();
  await withDatabase(async ({ db }) => {
    const answer = await reactivateThroughService(db, id, operatorName(), { takeWithinMs: wait * 1000 });
    switch (answer.outcome) {
      case 'not taken':
        throw new CommandError(
          `No worker of the service took the request within ${plural(wait, 'second')}: is the service running (npm start, or npm run cli -- serve or worker) on this database? Nothing was sent.`,
        );
      case 'not answered':
        throw new CommandError(`A worker of the service took the request but has not answered: subscriptions show ${id} says what became of it.`);
      case 'not reactivated':
        throw new CommandError(`${answer.detail}.`);
    }
    const answered = answer.httpStatus === null ? '' : ` with HTTP ${answer.httpStatus}`;
    console.log(
      answer.outcome === 'active meanwhile'
        ? `Subscription ${id} is active: another reactivation (an event's or another request's) got there first.`
        : `Reactivated subscription ${id}: its receiver answered the handshake${answered}; it is active. The events it missed while in error are not sent (docs/operators.md says how to catch up).`,
    );
  });
}

function parseWaitSeconds(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 600) throw new InvalidArgumentError('expected a whole number of seconds from 1 to 600.');
  return Number(value);
}

/**
 * `subscriptions rotate-secret`: the new secret from standard input (its one
 * trailing line break dropped), stored and recorded as the service's
 * $rotate-secret does (src/subscriptions/rotation.ts), with the operator's
 * user name; prints until when the previous secret signs too. Exits 1 when
 * refused (not known, off, in an overlap), 2 for a wrong id or secret.
 */
async function rotateSecret(id: string, options: { overlapSeconds?: number }): Promise<void> {
  if (!z.uuid().safeParse(id).success) throw new CommandError(`'${id}' is not a subscription id (a UUID, as subscriptions list shows it).`, 2);
  if (process.stdin.isTTY) {
    throw new CommandError('Give the new secret on standard input, not typed here (a terminal shows it), e.g.: read -rs SECRET && printf %s "$SECRET" | npm run cli -- subscriptions rotate-secret ID', 2);
  }
  const given = (await readStandardInput()).replace(/\r?\n$/, '');
  const { config } = oneShot();
  const { checkedSecret, createSecretBox, refusalReason, rotateSigningSecret, secretsEncryptionKey } = await rotating();
  const refused = (error: unknown) => (error instanceof FhirError ? new CommandError(`Not rotated: ${refusalReason(error)}.`, error.status === 400 ? 2 : 1) : error);
  let secret: string;
  try {
    secret = checkedSecret(given);
  } catch (error) {
    throw refused(error);
  }
  // The secrets are sealed with the service's key; a missing one is a configuration error (exit 2).
  const box = createSecretBox(await secretsEncryptionKey(config));
  await withDatabase(async ({ db }) => {
    const overlapSeconds = options.overlapSeconds ?? config.delivery.secretRotationOverlapSeconds;
    const rotation = await rotateSigningSecret(db, box, id, { secret, overlapSeconds }, { operator: operatorName() }).catch((error: unknown) => {
      throw refused(error);
    });
    console.log(
      overlapSeconds === 0
        ? `Rotated the signing secret of subscription ${id}: every call from now on is signed with the new secret only.`
        : `Rotated the signing secret of subscription ${id}. Until ${formatInstant(rotation.previousSecretUntil)} every call is signed with the previous secret too ` +
            '(X-Hub-Signature with the previous one, X-Hub-Signature-Next with the new one, webhook-signature with both), then with the new one only.',
    );
  });
}

async function readStandardInput(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** Who runs this command, for the record: the operating-system user (by uid when it has no name). */
function operatorName(): string {
  try {
    return userInfo().username;
  } catch {
    return `uid ${process.getuid?.() ?? 'unknown'}`;
  }
}

function parseOverlapSeconds(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) > maxSecretRotationOverlapSeconds) throw new InvalidArgumentError(`expected a whole number of seconds from 0 to ${maxSecretRotationOverlapSeconds}.`);
  return Number(value);
}

/** Why a file to load cannot be read, in a user's words; undefined when it can. */
async function unreadable(file: string): Promise<string | undefined> {
  try {
    if ((await stat(file)).isDirectory()) return 'it is a directory (give the files in it)';
    await access(file, fsConstants.R_OK);
    return undefined;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return path.isAbsolute(file) ? 'no such file' : `no such file (a relative path is read from ${process.cwd()}, where npm run runs: the project's folder)`;
    if (code === 'EACCES') return 'not readable by this user';
    return describeError(error);
  }
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

function parsePositiveInteger(value: string): number {
  if (!/^[1-9]\d*$/.test(value)) throw new InvalidArgumentError('expected a positive integer.');
  return Number(value);
}

/**
 * `load`: the files through src/loading/ndjson.ts, with a progress bar
 * (cli-progress) on a terminal and a plain line every 2 s otherwise; then a
 * summary with every refused line's number. Exits 1 if any line was refused.
 */
async function load(db: Db, files: string[], options: { chunkSize: number; dryRun: boolean }): Promise<void> {
  for (const file of files) {
    const problem = await unreadable(file);
    if (problem !== undefined) throw new CommandError(`Cannot read ${file}: ${problem}.`, 2);
  }
  const bar = process.stderr.isTTY
    ? new SingleBar({ format: '{bar} {percentage}% | {lines} lines, {loaded} loaded, {refused} refused | {rate}/s | ETA {eta_formatted}', hideCursor: true }, Presets.shades_classic)
    : undefined;
  const started = performance.now();
  let lastLine = started;
  const onProgress = ({ lines, loaded, refused, bytesRead, totalBytes }: LoadProgress) => {
    const rate = Math.round(lines / Math.max((performance.now() - started) / 1000, 0.001));
    if (bar !== undefined) {
      if (bar.getTotal() !== totalBytes) bar.start(totalBytes, 0);
      bar.update(bytesRead, { lines, loaded, refused, rate });
    } else if (performance.now() - lastLine >= 2_000) {
      lastLine = performance.now();
      console.log(`${lines} lines read (${Math.round((100 * bytesRead) / Math.max(totalBytes, 1))}%), ${loaded} ${options.dryRun ? 'valid' : 'loaded'}, ${refused} refused, ${rate} lines/s`);
    }
  };
  const { loadNdjson } = await loading();
  const summary = await loadNdjson(db, files, { ...options, onProgress }).finally(() => bar?.stop());
  const verb = options.dryRun ? 'Checked (dry run, nothing written):' : 'Loaded';
  console.log(`${verb} ${summary.loaded} resources of ${summary.lines} lines in ${summary.seconds.toFixed(1)} s (${Math.round(summary.loaded / Math.max(summary.seconds, 0.001))} resources/s).`);
  if (summary.refusals.length === 0) return;
  const shown = summary.refusals.slice(0, 100).map(({ file, line, lastLine, reason }) => `  ${file}:${lastLine === undefined ? line : `${line}-${lastLine}`}: ${reason}`);
  const more = summary.refusals.length > shown.length ? [`  … and ${summary.refusals.length - shown.length} more`] : [];
  throw new CommandError([`Not loaded: ${summary.refused} lines.`, ...shown, ...more].join('\n'));
}

function parseStatuses(value: string): SubscriptionStatus[] {
  const statuses = value.split(',').map((status) => status.trim());
  const unknown = statuses.filter((status) => !(subscriptionStatuses as readonly string[]).includes(status));
  if (unknown.length > 0) throw new InvalidArgumentError(`unknown status ${unknown.join(', ')}: use ${subscriptionStatuses.join(', ')}.`);
  return statuses as SubscriptionStatus[];
}

function attemptCells(call: Attempt): string[] {
  return [
    call.startedAt.toISOString(),
    call.id,
    call.kind,
    call.eventNumber === null ? '-' : String(call.eventNumber),
    call.resource ?? '-',
    String(call.attempt),
    call.outcome,
    call.httpStatus === null ? '-' : String(call.httpStatus),
    String(call.durationMs),
    call.error ?? '',
    oneLine(call.responseExcerpt ?? ''),
  ];
}

/** `1 call`, `2 calls`. */
function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

/** The subscriber's answer on one line of a table: its line breaks as spaces, at most 120 characters. */
function oneLine(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > 120 ? `${flat.slice(0, 119)}…` : flat;
}

/**
 * How far back each poll of `deliveries tail` looks: a call is recorded when
 * its batch settles, at most the 15 s response budget and a few statements
 * after it started, and its transaction may commit after later ones.
 */
const tailOverlapMs = 120_000;

/** `deliveries tail`: the calls recorded from now on, one line each, polled every half second until a signal. */
async function tailDeliveries(db: Db, subscriptionId: string | undefined): Promise<void> {
  if (subscriptionId !== undefined && !z.uuid().safeParse(subscriptionId).success) throw new CommandError(`'${subscriptionId}' is not a subscription id.`);
  const defaultSignal = onTerminationSignal;
  let stopped = false;
  const stop = new Promise<void>((resolve) => (onTerminationSignal = () => ((stopped = true), resolve())));
  try {
    // The calls seen (printed, or already there at the start), by id, with their start.
    const seen = new Map<string, Date>();
    const { attemptsSince } = await overview();
    const recent = () => attemptsSince(db, new Date(Date.now() - tailOverlapMs), subscriptionId);
    for (const call of await recent()) seen.set(call.id, call.startedAt);
    console.log(`Following the calls to ${subscriptionId === undefined ? 'every subscriber' : `subscription ${subscriptionId}`}; Ctrl-C stops.`);
    while (!stopped) {
      for (const call of await recent()) {
        if (seen.has(call.id)) continue;
        seen.set(call.id, call.startedAt);
        const [started, callId, kind, eventNumber, resource, attempt, outcome, status, ms, error, answer] = attemptCells(call);
        const event = eventNumber === '-' ? '' : ` event ${eventNumber}`;
        console.log(
          `${started}  ${call.subscriptionId}  call ${callId}  ${kind}${event} ${resource} #${attempt}  ${outcome} ${status} ${ms} ms${error === '' ? '' : `  ${error}`}${call.outcome === 'delivered' || answer === '' ? '' : `  answered: ${answer}`}`,
        );
      }
      for (const [id, startedAt] of seen) if (startedAt.getTime() < Date.now() - 2 * tailOverlapMs) seen.delete(id);
      await Promise.race([stop, sleep(500)]);
    }
  } finally {
    onTerminationSignal = defaultSignal;
  }
}

/** Configuration and a logger for a command that runs once: quiet unless LOG_LEVEL asks for more than info. */
function oneShot(): { config: Config; logger: Logger } {
  const config = loadConfig();
  return { config, logger: createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel) };
}

/** A comma list of scopes, each one known: exit 2 otherwise. */
function parseScopes(text: string): ApiKeyScope[] {
  const scopes = text.split(',').map((scope) => scope.trim());
  const unknown = scopes.filter((scope) => !(apiKeyScopes as readonly string[]).includes(scope));
  if (unknown.length > 0 || scopes.length === 0) throw new CommandError(`Unknown scope ${unknown.join(', ')}: use read, write and admin.`, 2);
  return scopes as ApiKeyScope[];
}

async function switchOff(id: string): Promise<void> {
  if (!z.uuid().safeParse(id).success) throw new CommandError(`'${id}' is not a subscription id (a UUID, as subscriptions list shows it).`, 2);
  const { switchOffById } = await import('../subscriptions/store.ts');
  await withDatabase(async ({ db }) => {
    const was = await switchOffById(db, id);
    if (was === undefined) throw new CommandError(`No subscription has id '${id}' (subscriptions list shows them).`);
    console.log(was === 'off' ? `Subscription ${id} was off already.` : `Switched subscription ${id} off (it was ${was}).`);
  });
}

async function withDatabase(work: (database: Awaited<ReturnType<typeof openDatabase>>) => Promise<void>): Promise<void> {
  const { config, logger } = oneShot();
  const database = await openDatabase(config, logger);
  try {
    await work(database);
  } finally {
    await database.close();
  }
}

/**
 * What SIGINT, SIGTERM and SIGHUP do. By default the process exits at once
 * (with 128 + the signal's number), and the 'exit' hook of the embedded
 * PostgreSQL asks a server this process started to stop. `serve` stops in
 * order instead, and `psql` leaves Ctrl-C to psql.
 */
let onTerminationSignal = (signal: NodeJS.Signals): void => process.exit(128 + constants.signals[signal]);
for (const name of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(name, (signal) => onTerminationSignal(signal));

/**
 * Runs until SIGINT, SIGTERM or SIGHUP, then stops in order: the HTTP API
 * stops taking requests, the workers finish, the pool closes, and last the
 * embedded PostgreSQL; then one "stopped" line.
 */
async function serve(roles: Roles): Promise<void> {
  const config = loadConfig();
  const logger = createLogger(config.logLevel);
  // The API and the dispatcher, loaded only by the commands that run them: a one-shot command starts without them.
  const { startService } = await import('../service.ts');
  const service = await startService(config, logger, roles);
  if (service.address === undefined) logger.info('Workers running');
  const signal = await new Promise<NodeJS.Signals>((resolve) => (onTerminationSignal = resolve));
  logger.info(`${signal} received, stopping`);
  // npm forwards the terminal's Ctrl-C, so one Ctrl-C arrives twice at once: that is ignored.
  // Another signal a second later means "now": exit, and the exit hook still stops PostgreSQL.
  const stoppingSince = Date.now();
  onTerminationSignal = (again) => {
    if (Date.now() - stoppingSince < 1_000) return;
    logger.warn(`${again} received again: stopping at once`);
    process.exit(1);
  };
  await service.close();
  logger.info('stopped');
}

/**
 * psql on the service's database, its password passed in PGPASSWORD (not on
 * the command line, where `ps` shows it); without psql on the PATH, where to
 * connect another client.
 */
async function psql(args: string[]): Promise<void> {
  const { config, logger } = oneShot();
  const server = await databaseServer(config, logger);
  const url = new URL(server.url);
  const password = decodeURIComponent(url.password);
  url.password = '';
  const defaultSignal = onTerminationSignal;
  // psql handles Ctrl-C itself (it cancels the running query); this process waits for it.
  onTerminationSignal = (signal) => (signal === 'SIGINT' ? undefined : defaultSignal(signal));
  try {
    const exitCode = await new Promise<number | null>((resolve, reject) => {
      const child = spawn('psql', [url.toString(), ...args], { stdio: 'inherit', env: { ...process.env, PGPASSWORD: password } });
      child.once('error', reject);
      child.once('close', resolve);
    }).catch((error: unknown) => {
      if ((error as { code?: unknown }).code !== 'ENOENT') throw error;
      const passwordIsIn =
        config.databaseUrl === undefined ? path.resolve(config.embeddedDataDir, 'postgres.password') : config.databaseDirectUrl === undefined ? 'DATABASE_URL' : 'DATABASE_DIRECT_URL';
      throw new CommandError(`psql is not installed here. Connect with any PostgreSQL client to:\n  ${url.toString()}\nwith the password in ${passwordIsIn}.`);
    });
    if (exitCode !== 0) throw new CommandError(`psql exited with code ${exitCode}`);
  } finally {
    onTerminationSignal = defaultSignal;
    await server.release();
  }
}

function table(header: string[], rows: string[][]): string {
  const widths = header.map((title, column) => Math.max(title.length, Math.min(maxColumnWidth, Math.max(0, ...rows.map((row) => row[column]!.length)))));
  return [header, ...rows].map((row) => row.map((cell, column) => cell.padEnd(widths[column]!)).join('  ').trimEnd()).join('\n');
}

/**
 * Exit codes: 0 done (help included), 1 the command failed, 2 the command
 * line or the configuration is wrong. Errors are printed as one message,
 * never as a dump of the objects they carry.
 */
async function main(): Promise<number> {
  try {
    await commandLine().parseAsync(process.argv);
    return 0;
  } catch (error) {
    // commander has already printed its own message (or the help).
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
    if (error instanceof ConfigError) {
      console.error(error.message);
      return 2;
    }
    console.error(error instanceof CommandError ? error.message : `Failed: ${describeError(error)}`);
    return error instanceof CommandError ? error.exitCode : 1;
  }
}

process.exitCode = await main();
