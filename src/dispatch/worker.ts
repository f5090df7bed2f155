import { EventEmitter } from 'node:events';
import { Logger as WorkerLogger, makeWorkerUtils, run, type Runner, type WorkerEvents } from 'graphile-worker';
import type { Logger } from 'pino';
import type { Config } from '../config/index.ts';
import { errorFields } from '../config/logger.ts';
import { connectDatabase, type DatabaseHandle } from '../db/database.ts';
import { createAlertMailer } from '../mail/alerts.ts';
import { createSecretBox } from '../subscriptions/secrets.ts';
import { keepWorkerPoolAlive, type Liveness } from './liveness.ts';
import { createTokenProvider } from './oauth.ts';
import { createDeliveryAgent } from './ssrf.ts';
import { dispatchCrontab, dispatchTasks } from './tasks/index.ts';

export type Workers = { stop: () => Promise<void> };

/**
 * Connections of a worker process: a job holds one only for its short queries
 * (never during its calls), and graphile-worker one more to LISTEN.
 */
const workerConnections = 20;

/**
 * Runs the dispatcher's tasks on graphile-worker in this process. Jobs are
 * picked up through LISTEN/NOTIFY as their transactions commit; several
 * processes on one database share them (each job is locked by one).
 */
export async function startWorkers(config: Config, database: DatabaseHandle, secretsKey: Buffer, logger: Logger): Promise<Workers> {
  // The workers' own pool, committing asynchronously: job locks and completions, attempt records,
  // retries and state changes. A PostgreSQL crash can lose only the last of these commits, and WAL
  // order means a lost change takes its job's completion with it: the job runs again (at least
  // once), and no event is lost, since the writer's transaction that enqueued it commits synchronously.
  const workerDatabase = connectDatabase(database.connectionString, (error) => logger.warn({ err: error }, 'idle database connection failed'), {
    maxConnections: workerConnections,
    settings: { synchronous_commit: 'off' },
  });
  const dispatcher = createDeliveryAgent({
    allowPrivateNetworks: config.delivery.allowPrivateNetworks,
    connectTimeoutMs: config.delivery.connectTimeoutMs,
    responseTimeoutMs: config.delivery.responseTimeoutMs,
  });
  const mailer = createAlertMailer(config.mail, logger);
  const workerUtils = await makeWorkerUtils({ pgPool: workerDatabase.pool });
  const taskList = dispatchTasks({
    db: workerDatabase.db,
    workerUtils,
    box: createSecretBox(secretsKey),
    baseUrl: config.baseUrl,
    namingSystem: config.webhookNamingSystem,
    delivery: config.delivery,
    dispatcher,
    tokens: config.oauth === undefined ? undefined : createTokenProvider(config.oauth),
    mailer,
    logger,
  });
  // graphile-worker locks jobs with the id of the worker pool that took them: crash recovery needs it.
  const events: WorkerEvents = new EventEmitter();
  let poolId: string | undefined;
  events.once('pool:create', ({ workerPool }) => (poolId = workerPool.id));
  const runner: Runner = await run({
    events,
    pgPool: workerDatabase.pool,
    concurrency: config.delivery.concurrency,
    // Complete jobs in batches: fewer commits per delivery. (Its localQueue, which also batches
    // fetching, fails its graceful shutdown in 0.18: tested, left off.)
    preset: { worker: { completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
    taskList,
    crontab: dispatchCrontab,
    noHandleSignals: true,
    logger: new WorkerLogger(() => (level, message, meta) => {
      // graphile-worker warns of a pool smaller than its concurrency; by design here (workerConnections).
      const expected = message.includes('smaller than concurrency');
      const log = level === 'error' ? logger.error : level === 'warning' && !expected ? logger.warn : logger.debug;
      log.call(logger, loggableMeta(meta), message);
    }),
  }).catch(async (error: unknown) => {
    await workerUtils.release();
    await workerDatabase.close();
    throw error;
  });
  let liveness: Liveness;
  try {
    if (poolId === undefined) throw new Error('graphile-worker started without announcing its worker pool');
    liveness = await keepWorkerPoolAlive(workerDatabase.pool, poolId, logger);
  } catch (error) {
    await runner.stop();
    await workerUtils.release();
    await workerDatabase.close();
    throw error;
  }
  return {
    stop: async () => {
      await runner.stop();
      await liveness.stop();
      await workerUtils.release();
      await workerDatabase.close();
      mailer.close();
      await dispatcher.close();
    },
  };
}

/**
 * graphile-worker's log metadata without the objects it carries (pg clients,
 * whole jobs with their payloads): errors as message and code, a job as its
 * id and task, plain values as they are.
 */
function loggableMeta(meta: Record<string, unknown> | undefined): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(meta ?? {})) {
    if (value instanceof Error) fields[key] = errorFields(value);
    else if (key === 'job' && typeof value === 'object' && value !== null) {
      const job = value as { id?: unknown; task_identifier?: unknown; attempts?: unknown };
      fields.job = { id: job.id, task: job.task_identifier, attempts: job.attempts };
    } else if (value === null || ['string', 'number', 'boolean'].includes(typeof value)) fields[key] = value;
  }
  return fields;
}
