import { Logger as WorkerLogger, run, type Runner } from 'graphile-worker';
import type { Logger } from 'pino';
import type { Config } from '../config/index.ts';
import type { DatabaseHandle } from '../db/database.ts';
import { createAlertMailer } from '../mail/alerts.ts';
import { createSecretBox } from '../subscriptions/secrets.ts';
import { createTokenProvider } from './oauth.ts';
import { createDeliveryAgent } from './ssrf.ts';
import { dispatchCrontab, dispatchTasks } from './tasks.ts';

export type Workers = { stop: () => Promise<void> };

/**
 * Runs the dispatcher's tasks on graphile-worker in this process. Jobs are
 * picked up through LISTEN/NOTIFY as their transactions commit; several
 * processes on one database share them (each job is locked by one).
 */
export async function startWorkers(config: Config, database: DatabaseHandle, secretsKey: Buffer, logger: Logger): Promise<Workers> {
  const dispatcher = createDeliveryAgent({
    allowPrivateNetworks: config.delivery.allowPrivateNetworks,
    connectTimeoutMs: config.delivery.connectTimeoutMs,
    responseTimeoutMs: config.delivery.responseTimeoutMs,
  });
  const mailer = createAlertMailer(config.mail, logger);
  const taskList = dispatchTasks({
    db: database.db,
    box: createSecretBox(secretsKey),
    baseUrl: config.baseUrl,
    namingSystem: config.webhookNamingSystem,
    delivery: config.delivery,
    dispatcher,
    tokens: config.oauth === undefined ? undefined : createTokenProvider(config.oauth),
    mailer,
    logger,
  });
  const runner: Runner = await run({
    pgPool: database.pool,
    concurrency: config.delivery.concurrency,
    // Complete jobs in batches: fewer commits per delivery. (Its localQueue, which also batches
    // fetching, fails its graceful shutdown in 0.18: tested, left off.)
    preset: { worker: { completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
    taskList,
    crontab: dispatchCrontab,
    noHandleSignals: true,
    logger: new WorkerLogger(() => (level, message, meta) => {
      const log = level === 'error' ? logger.error : level === 'warning' ? logger.warn : logger.debug;
      log.call(logger, meta ?? {}, message);
    }),
  });
  return {
    stop: async () => {
      await runner.stop();
      mailer.close();
      await dispatcher.close();
    },
  };
}
