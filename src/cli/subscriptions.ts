import { userInfo } from 'node:os';
import { InvalidArgumentError, type Command } from 'commander';
import { z } from 'zod';
import { maxSecretRotationOverlapSeconds } from '../config/index.ts';
import { subscriptionStatuses, type SubscriptionStatus } from '../db/schema.ts';
import { formatInstant } from '../fhir/instant.ts';
import { FhirError } from '../fhir/outcome.ts';
import { CommandError, oneShot, withDatabase } from './command.ts';
import { attemptCells, maxColumnWidth, plural, table } from './text.ts';

/** This group's own modules, loaded when one of its commands runs (src/cli/main.ts says why). */
const overview = () => import('../operations/delivery-overview.ts');
const reactivating = () => import('../subscriptions/reactivation-requests.ts');

const rotating = () =>
  Promise.all([import('../subscriptions/rotation.ts'), import('../subscriptions/secrets.ts'), import('../subscriptions/requests.ts')]).then(
    ([rotation, secrets, requests]) => ({
      ...rotation,
      ...secrets,
      ...requests,
    }),
  );

/** `subscriptions list | show | reactivate | rotate-secret | switch-off`. */
export function registerSubscriptionsCommands(program: Command): void {
  const subscriptions = program.command('subscriptions').description('the subscriptions: their state, their calls, what is queued');
  subscriptions
    .command('list')
    .description(
      `list the subscriptions: id, status, failed calls since the last success, deactivations in the last 24 hours (more than one: a flapping subscriber), the last success, criteria (a topic with its filters and payload level), endpoint (credentials masked), error; a value over ${maxColumnWidth} characters runs past its column on its own line`,
    )
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
        console.log(
          rows.length === 0
            ? 'No subscriptions.'
            : table(['ID', 'STATUS', 'FAILED CALLS SINCE SUCCESS', 'DEACTIVATIONS 24H', 'LAST SUCCESS', 'CRITERIA', 'ENDPOINT', 'ERROR'], rows),
        );
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
        console.log(
          `\nLast calls (newest first):\n${calls.length === 0 ? '  none' : table(['STARTED', 'CALL', 'KIND', 'EVENT', 'RESOURCE', 'ATTEMPT', 'OUTCOME', 'HTTP', 'MS', 'ERROR', 'ANSWER'], calls.map(attemptCells))}`,
        );
        const queued = await queuedWork(db, subscription.id);
        const queuedRows = queued.map((work) => [
          work.task,
          String(work.items),
          String(work.waiting),
          String(work.scheduled),
          String(work.running),
          work.waitingSince?.toISOString() ?? '',
          work.nextRunAt?.toISOString() ?? '',
        ]);
        console.log(
          `\nQueued:\n${queued.length === 0 ? '  nothing' : table(['WORK', 'ITEMS', 'WAITING', 'SCHEDULED', 'RUNNING', 'WAITING SINCE', 'NEXT RUN'], queuedRows)}`,
        );
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
    .option(
      '--overlap-seconds <seconds>',
      `how long the previous secret signs calls too, 0 to ${maxSecretRotationOverlapSeconds} (default: SECRET_ROTATION_OVERLAP_SECONDS, a day)`,
      parseOverlapSeconds,
    )
    .action((id: string, options: { overlapSeconds?: number }) => rotateSecret(id, options));

  subscriptions
    .command('switch-off')
    .description(
      'switch a subscription off by its id, whichever API key created it (a client switches off only its own, by criteria): it becomes off, with end set, and is never called again',
    )
    .argument('<id>', "the subscription's id")
    .action((id: string) => switchOff(id));
}

function parseStatuses(value: string): SubscriptionStatus[] {
  const statuses = value.split(',').map((status) => status.trim());
  const unknown = statuses.filter((status) => !(subscriptionStatuses as readonly string[]).includes(status));
  if (unknown.length > 0) throw new InvalidArgumentError(`unknown status ${unknown.join(', ')}: use ${subscriptionStatuses.join(', ')}.`);
  return statuses as SubscriptionStatus[];
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
    throw new CommandError(
      'Give the new secret on standard input, not typed here (a terminal shows it), e.g.: read -rs SECRET && printf %s "$SECRET" | npm run cli -- subscriptions rotate-secret ID',
      2,
    );
  }
  const given = (await readStandardInput()).replace(/\r?\n$/, '');
  const { config } = oneShot();
  const { checkedSecret, createSecretBox, refusalReason, rotateSigningSecret, secretsEncryptionKey } = await rotating();
  const refused = (error: unknown) =>
    error instanceof FhirError ? new CommandError(`Not rotated: ${refusalReason(error)}.`, error.status === 400 ? 2 : 1) : error;
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
  if (!/^\d+$/.test(value) || Number(value) > maxSecretRotationOverlapSeconds)
    throw new InvalidArgumentError(`expected a whole number of seconds from 0 to ${maxSecretRotationOverlapSeconds}.`);
  return Number(value);
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
