import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Logger as WorkerLogger, makeWorkerUtils, run, type Runner, type WorkerEvents } from 'graphile-worker';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Config } from '../config/index.ts';
import { errorFields } from '../config/logger.ts';
import { connectDatabase, type DatabaseHandle } from '../db/database.ts';
import { createAlertMailer } from '../mail/alerts.ts';
import { createMetrics, type Metrics } from '../metrics/metrics.ts';
import { createSecretBox } from '../subscriptions/secrets.ts';
import { createCallContext, type DispatchContext } from './subscriber.ts';
import { releaseStrandedClaims } from './events/log.ts';
import { newSenderId, startEventSender, type EventSender } from './events/sender.ts';
import { keepWorkerPoolAlive, type Liveness } from './liveness.ts';
import { dispatchCrontab, dispatchTasks } from './tasks/index.ts';

export type Workers = { stop: () => Promise<void> };

/**
 * graphile-worker's own pool, on the server itself: it LISTENs on a
 * connection it takes from the pool it is given, for as long as it runs, and
 * names its prepared statements; a transaction-mode pooler carries neither.
 * The other connection takes jobs, completes them and runs the cron, a short
 * statement at a time, its workers waiting their turn. The jobs themselves
 * (handshakes, reactivations, alerts) query through the workers' pool.
 */
const jobQueueConnections = 2;

/**
 * Runs the dispatcher in this process: the event sender, which delivers the
 * subscription event log (src/dispatch/events/), and graphile-worker's tasks
 * (handshakes, reactivations, alert e-mails, the daily cleanup). Both pick up
 * their work through LISTEN/NOTIFY as the transactions that made it commit;
 * several processes on one database share it (each subscription claimed, each
 * job locked, by one). What they do is counted in `metrics`, the registry the
 * process's /metrics serves.
 */
export async function startWorkers(
  config: Config,
  database: DatabaseHandle,
  secretsKey: Buffer,
  logger: Logger,
  metrics: Metrics = createMetrics(),
): Promise<Workers> {
  // The workers' own pools, committing asynchronously: claims, job locks and completions, attempt
  // records, retries and state changes. A PostgreSQL crash can lose only the last of these commits,
  // and WAL order means a lost record takes the release of its claim (or its job's completion) with
  // it: the events are sent again (at least once), and none is lost, since the writer's transaction
  // that recorded them commits synchronously. A delivery or a job holds a connection only for its
  // short queries, never during its calls: WORKER_DATABASE_POOL_SIZE of them serve WORKER_CONCURRENCY.
  const onIdleError = (error: Error) => logger.warn({ err: error }, 'idle database connection failed');
  const asynchronousCommit = { synchronous_commit: 'off' };
  const workerDatabase = connectDatabase(database.connectionString, onIdleError, {
    maxConnections: config.workerDatabasePoolSize,
    settings: asynchronousCommit,
    applicationName: 'fhir-webhooks workers',
    directConnectionString: database.directConnectionString,
  });
  const jobQueue = connectDatabase(database.directConnectionString ?? database.connectionString, onIdleError, {
    maxConnections: jobQueueConnections,
    settings: asynchronousCommit,
    applicationName: 'fhir-webhooks job queue',
  });
  const calls = createCallContext({
    db: workerDatabase.db,
    box: createSecretBox(secretsKey),
    baseUrl: config.baseUrl,
    namingSystem: config.webhookNamingSystem,
    delivery: config.delivery,
    oauth: config.oauth,
    metrics,
    logger,
  });
  const mailer = createAlertMailer(config.mail, logger);
  const workerUtils = await makeWorkerUtils({ pgPool: workerDatabase.pool });
  const context: DispatchContext = { ...calls.context, workerUtils, mailer, alertIntervalSeconds: config.mail.intervalSeconds, logger };
  const closeAll = async () => {
    await workerUtils.release();
    await jobQueue.close();
    await workerDatabase.close();
    mailer.close();
    await calls.close();
  };

  // The event sender, registered before it claims anything (its claims name it).
  const senderId = newSenderId();
  // Its heartbeat starts first, and asks it what it works on once it runs.
  const started: { sender?: EventSender } = {};
  let senderLiveness: Liveness;
  try {
    senderLiveness = await keepWorkerPoolAlive(
      workerDatabase.pool,
      { poolId: senderId, kind: 'event-sender' },
      async () => {
        const released = await releaseStrandedClaims(workerDatabase.db, senderId, started.sender?.working() ?? []);
        if (released > 0)
          logger.warn(
            { sender: senderId, subscriptions: released },
            'freed subscriptions this process had claimed but was not sending (a lost database connection)',
          );
      },
      logger,
    );
  } catch (error) {
    await closeAll();
    throw error;
  }
  // Its LISTEN, like graphile-worker's, needs a session: on the server itself.
  const sender = startEventSender(context, {
    connectionString: database.directConnectionString ?? database.connectionString,
    concurrency: config.delivery.concurrency,
    id: senderId,
  });
  started.sender = sender;

  const workerLogger = new WorkerLogger(() => (level, message, meta) => {
    // graphile-worker warns of a pool smaller than its concurrency; by design here (jobQueueConnections).
    const expected = message.includes('smaller than concurrency');
    const log = level === 'error' ? logger.error : level === 'warning' && !expected ? logger.warn : logger.debug;
    log.call(logger, loggableMeta(meta), message);
  });
  const startRunner = () =>
    runWorkerPool(jobQueue.pool, workerDatabase.pool, { concurrency: config.delivery.concurrency, taskList: dispatchTasks(context), logger, workerLogger });

  let current: RunningPool;
  try {
    current = await startRunner();
  } catch (error) {
    await sender.stop();
    await senderLiveness.stop().catch(() => undefined);
    await closeAll();
    throw error;
  }

  // graphile-worker stops its whole runner when it cannot record a job's failure (the database
  // went away mid-job), and the heartbeat stops it when a lost connection stranded one of its
  // jobs. The dispatcher must not die silently with it: a runner that stops without being asked
  // is started again, once the database answers, and its predecessor's jobs are freed at once
  // (graphile-worker's force_unlock_workers) rather than after the 20 s of a silent pool.
  let stopping = false;
  const supervise = (running: RunningPool): void => {
    void running.runner.promise.then(
      () => restart(running, undefined),
      (error: unknown) => restart(running, error),
    );
  };
  const restart = async (stopped: RunningPool, error: unknown) => {
    if (stopping) return;
    logger.error({ err: error, workerPool: stopped.poolId }, 'the workers stopped on their own; starting them again');
    await stopped.liveness.stop().catch(() => undefined);
    for (let delayMs = 1_000; !stopping; delayMs = Math.min(delayMs * 2, 30_000)) {
      await sleep(delayMs);
      if (stopping) return;
      try {
        current = await startRunner();
      } catch (startError) {
        logger.warn({ err: startError }, `the workers could not start again; trying again in ${Math.min(delayMs * 2, 30_000) / 1000} s`);
        continue;
      }
      supervise(current);
      logger.info({ workerPool: current.poolId, previous: stopped.poolId }, 'the workers are running again');
      // Best effort: should it fail, the sweep of silent pools frees these jobs within 20 s.
      await workerDatabase.pool
        .query('SELECT graphile_worker.force_unlock_workers($1::text[])', [[stopped.poolId]])
        .then(() => workerDatabase.pool.query('DELETE FROM webhook.worker_pools WHERE pool_id = $1', [stopped.poolId]))
        .catch((cleanupError: unknown) => logger.warn({ err: cleanupError }, 'could not free the jobs of the stopped workers yet'));
      return;
    }
  };
  supervise(current);

  // Stopping twice (a signal during a shutdown, a test's own stop then its cleanup) waits for the
  // one shutdown: graphile-worker's runner must not be released twice.
  let stopped: Promise<void> | undefined;
  const stopAll = async () => {
    stopping = true;
    await Promise.all([sender.stop(), current.runner.stop().catch(() => undefined)]);
    await senderLiveness.stop().catch(() => undefined);
    await current.liveness.stop().catch(() => undefined);
    await closeAll();
  };
  return { stop: () => (stopped ??= stopAll()) };
}

type RunningPool = { runner: Runner; poolId: string; liveness: Liveness };

/**
 * One graphile-worker runner on `jobQueuePool`, with its liveness (crash
 * recovery needs the id of the worker pool that locks the jobs), which beats
 * and sweeps through `pool`, the workers' pool. Should its heartbeat find a
 * job the pool holds but does not run (a lost connection stranded it as it
 * completed), the runner is stopped: the supervisor starts a new one and frees
 * the old pool's jobs, through graphile-worker's public API.
 */
async function runWorkerPool(
  jobQueuePool: pg.Pool,
  pool: pg.Pool,
  options: { concurrency: number; taskList: ReturnType<typeof dispatchTasks>; logger: Logger; workerLogger: WorkerLogger },
): Promise<RunningPool> {
  const events: WorkerEvents = new EventEmitter();
  let poolId: string | undefined;
  events.once('pool:create', ({ workerPool }) => (poolId = workerPool.id));
  // The jobs this process runs, and those it finished in the last 10 s (their completion may still be on its way).
  const running = new Map<string, number>();
  events.on('job:start', ({ job }) => running.set(job.id, Number.POSITIVE_INFINITY));
  events.on('job:complete', ({ job }) => running.set(job.id, Date.now()));
  const runningJobs = () => {
    for (const [id, finished] of running) if (finished < Date.now() - 10_000) running.delete(id);
    return [...running.keys()];
  };
  const runner: Runner = await run({
    events,
    pgPool: jobQueuePool,
    concurrency: options.concurrency,
    // Complete jobs in batches: fewer commits per job. (Its localQueue fails its graceful shutdown in 0.18: tested, left off.)
    preset: { worker: { completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
    taskList: options.taskList,
    crontab: dispatchCrontab,
    noHandleSignals: true,
    logger: options.workerLogger,
  });
  try {
    if (poolId === undefined) throw new Error('graphile-worker started without announcing its worker pool');
    const id = poolId;
    const strandedJobs = async () => {
      const { rows } = await pool.query<{ stranded: number }>(
        `SELECT count(*)::int AS stranded FROM graphile_worker.jobs
         WHERE locked_by = $1 AND locked_at < now() - interval '10 seconds' AND NOT (id = ANY ($2::bigint[]))`,
        [id, runningJobs()],
      );
      if ((rows[0]?.stranded ?? 0) === 0) return;
      options.logger.warn(
        { workerPool: id, jobs: rows[0]?.stranded },
        'this process holds jobs it no longer runs (a lost database connection); restarting its workers to free them',
      );
      void runner.stop().catch(() => undefined);
    };
    return { runner, poolId: id, liveness: await keepWorkerPoolAlive(pool, { poolId: id, kind: 'graphile-worker' }, strandedJobs, options.logger) };
  } catch (error) {
    await runner.stop();
    throw error;
  }
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
