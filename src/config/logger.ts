import pino, { type Logger } from 'pino';
import type { Config } from './index.ts';

/** The process logger. Credentials are redacted wherever they could appear. */
export function createLogger(level: Config['logLevel']): Logger {
  return pino({
    level,
    redact: {
      paths: ['req.headers["x-api-key"]', 'req.headers.authorization', 'headers["x-api-key"]', 'headers.authorization'],
      censor: '[redacted]',
    },
  });
}
