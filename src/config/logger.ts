import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';
import type { Config } from './index.ts';

/** An error as a log line shows it: its message and code, never the objects it carries (pg clients, sockets, jobs). */
export type ErrorFields = { message: string; code?: string };

export function errorFields(error: unknown): ErrorFields {
  if (!(error instanceof Error)) return { message: String(error) };
  const message =
    error instanceof AggregateError && error.errors.length > 0
      ? `${error.message}: ${error.errors.map((inner) => describeError(inner)).join('; ')}`
      : error.message;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' || typeof code === 'number' ? { message, code: String(code) } : { message };
}

/** The same, as one line of text: "message (code)". */
export function describeError(error: unknown): string {
  const { message, code } = errorFields(error);
  return code === undefined ? message : `${message} (${code})`;
}

/**
 * An HTTP request as a log line shows it: method and path, without the query
 * string (a search's values can be patient data), and the client's address.
 */
function requestFields(request: { method?: string; url?: string; ip?: string }): Record<string, unknown> {
  return { method: request.method, url: request.url?.split('?')[0], remoteAddress: request.ip };
}

/**
 * The process logger: JSON lines, or readable one-line events when stdout is a
 * terminal. Errors under `err` or `error` are logged as message and code;
 * credentials are redacted wherever they could appear. `destination`, for
 * tests: where the JSON lines go instead of stdout.
 */
export function createLogger(level: Config['logLevel'], destination?: pino.DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    level,
    serializers: { err: errorFields, error: errorFields, req: requestFields },
    redact: {
      paths: ['req.headers["x-api-key"]', 'req.headers.authorization', 'headers["x-api-key"]', 'headers.authorization'],
      censor: '[redacted]',
    },
  };
  if (destination !== undefined) return pino(options, destination);
  if (!process.stdout.isTTY) return pino(options);
  // Synchronous, in this thread: nothing is lost when the process exits right after a line. The list of
  // the migrations a first start applies (60-odd names) is in the JSON lines only: on a terminal its
  // message sums it up (src/db/migrations.ts appliedSummary).
  return pino(options, pretty({ sync: true, singleLine: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,migrations' }));
}
