import type { Logger } from 'pino';
import { loadConfig, type Config } from '../config/index.ts';
import { createLogger } from '../config/logger.ts';
import { openDatabase } from '../db/open.ts';

/** A command that failed for a reason it prints; exit status 1, or 2 for input refused (as commander's usage errors). */
export class CommandError extends Error {
  readonly exitCode: 1 | 2;
  constructor(message: string, exitCode: 1 | 2 = 1) {
    super(message);
    this.exitCode = exitCode;
  }
}

/** Configuration and a logger for a command that runs once: quiet unless LOG_LEVEL asks for more than info. */
export function oneShot(): { config: Config; logger: Logger } {
  const config = loadConfig();
  return { config, logger: createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel) };
}

export async function withDatabase(work: (database: Awaited<ReturnType<typeof openDatabase>>) => Promise<void>): Promise<void> {
  const { config, logger } = oneShot();
  const database = await openDatabase(config, logger);
  try {
    await work(database);
  } finally {
    await database.close();
  }
}
