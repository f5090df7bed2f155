import { setTimeout as sleep } from 'node:timers/promises';
import { Option, type Command } from 'commander';
import { z } from 'zod';
import type { Db } from '../db/database.ts';
import { FhirError } from '../fhir/outcome.ts';
import type { ResendSelection } from '../subscriptions/resend.ts';
import { CommandError, withDatabase } from './command.ts';
import { handleTerminationSignals } from './signals.ts';
import { attemptCells } from './text.ts';

/** This group's own modules, loaded when one of its commands runs (src/cli/main.ts says why). */
const overview = () => import('../operations/delivery-overview.ts');
const resending = () =>
  Promise.all([import('../subscriptions/resend.ts'), import('../subscriptions/requests.ts')]).then(([resend, requests]) => ({ ...resend, ...requests }));

/** `deliveries tail | resend`. */
export function registerDeliveriesCommands(program: Command): void {
  const deliveries = program.command('deliveries').description('calls to subscribers');
  deliveries
    .command('tail')
    .description('print the calls to subscribers as they are recorded, until Ctrl-C')
    .option('--subscription <id>', "only this subscription's calls")
    .action((options: { subscription?: string }) => withDatabase((database) => tailDeliveries(database.db, options.subscription)));
  deliveries
    .command('resend')
    .description(
      'send recorded events of an active subscription again (same event number, version and webhook-id): one event, or every event failed for good since an instant',
    )
    .argument('<subscription-id>', "the subscription's id")
    .addOption(
      new Option('--event <number>', "the event with this number (the EVENT column of subscriptions show, or deliveries tail's 'event N')").conflicts([
        'attempt',
        'failedSince',
      ]),
    )
    .addOption(
      new Option(
        '--attempt <id>',
        "the event of this recorded call (the CALL column of subscriptions show, or deliveries tail's 'call N'; webhook.delivery_attempts.id)",
      ).conflicts(['failedSince']),
    )
    .option('--failed-since <instant>', 'every event that failed for good since this instant (ISO 8601, e.g. 2026-11-25T09:00:00Z)')
    .action((id: string, options: { event?: string; attempt?: string; failedSince?: string }) => withDatabase((database) => resend(database.db, id, options)));
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
  let stopped = false;
  const stop = Promise.withResolvers<void>();
  const defaultSignal = handleTerminationSignals(() => ((stopped = true), stop.resolve()));
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
      await Promise.race([stop.promise, sleep(500)]);
    }
  } finally {
    handleTerminationSignals(defaultSignal);
  }
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
  const line = (event: { eventNumber: number | null; resource: string }) =>
    `${event.eventNumber === null ? '' : `event ${event.eventNumber} `}${event.resource}`;
  for (const event of outcome.queued) console.log(`Queued ${line(event)}`);
  for (const event of outcome.skipped) console.log(`Skipped ${line(event)}: ${event.reason}`);
  if (outcome.queued.length === 0 && outcome.skipped.length === 0) console.log(`${nothingToResend}.`);
}
