import { constants } from 'node:os';

type TerminationSignalHandler = (signal: NodeJS.Signals) => void;

/**
 * What SIGINT, SIGTERM and SIGHUP do. By default the process exits at once
 * (with 128 + the signal's number), and the 'exit' hook of the embedded
 * PostgreSQL asks a server this process started to stop. `serve` stops in
 * order instead, and `psql` leaves Ctrl-C to psql.
 */
let onTerminationSignal: TerminationSignalHandler = (signal) => process.exit(128 + constants.signals[signal]);
for (const name of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(name, (signal) => onTerminationSignal(signal));

/** Makes `handler` what a termination signal does; returns what it did before, for the command to put back. */
export function handleTerminationSignals(handler: TerminationSignalHandler): TerminationSignalHandler {
  const previous = onTerminationSignal;
  onTerminationSignal = handler;
  return previous;
}
