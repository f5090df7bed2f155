import type { Command } from 'commander';
import { loadConfig } from '../config/index.ts';
import { createLogger } from '../config/logger.ts';
import type { Roles } from '../service.ts';
import { handleTerminationSignals } from './signals.ts';

/** `serve`, `api` and `worker`: the service, whole or in parts. */
export function registerServeCommands(program: Command): void {
  program
    .command('serve')
    .description("the HTTP API and the dispatcher's workers (what npm start runs)")
    .action(() => serve({ api: true, workers: true }));
  program
    .command('api')
    .description('the HTTP API only')
    .action(() => serve({ api: true, workers: false }));
  program
    .command('worker')
    .description("the dispatcher's workers only; run as many as you like on one database")
    .action(() => serve({ api: false, workers: true }));
}

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
  const signal = await new Promise<NodeJS.Signals>((resolve) => handleTerminationSignals(resolve));
  logger.info(`${signal} received, stopping`);
  // npm forwards the terminal's Ctrl-C, so one Ctrl-C arrives twice at once: that is ignored.
  // Another signal a second later means "now": exit, and the exit hook still stops PostgreSQL.
  const stoppingSince = Date.now();
  handleTerminationSignals((again) => {
    if (Date.now() - stoppingSince < 1_000) return;
    logger.warn(`${again} received again: stopping at once`);
    process.exit(1);
  });
  await service.close();
  logger.info('stopped');
}
