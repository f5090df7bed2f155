import { parseArgs } from 'node:util';
import { z } from 'zod';
import { createApiKey, listApiKeys, revokeApiKey } from './auth/api-keys.ts';
import { ConfigError, loadConfig, type Config } from './config/index.ts';
import { createLogger } from './config/logger.ts';
import { applyMigrations } from './db/migrations.ts';
import { openDatabase, startService, type Roles } from './service.ts';

const usage = `Usage: npm run cli -- <command>

Commands:
  serve                      the HTTP API and the dispatcher's workers (what npm start runs)
  api                        the HTTP API only
  worker                     the dispatcher's workers only
  migrate                    apply pending database migrations and exit
  api-key create --name N    create an API key and print it once
  api-key list               list API keys (names and ids; keys are never stored)
  api-key revoke ID          revoke an API key by id
`;

/** The command line was wrong: say why and show the usage. */
class UsageError extends Error {}
/** The command was right but could not be done: say why. */
class CommandError extends Error {}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  const config = loadConfig();
  const logger = createLogger(config.logLevel);

  switch (command) {
    case 'serve':
      return serve(config, logger, { api: true, workers: true });
    case 'api':
      return serve(config, logger, { api: true, workers: false });
    case 'worker':
      return serve(config, logger, { api: false, workers: true });
    case 'migrate': {
      const database = await openDatabase({ ...config, migrateOnStart: false }, logger);
      try {
        const applied = await applyMigrations(database.pool, (message) => logger.debug(message));
        console.log(applied.length === 0 ? 'The database is up to date.' : `Applied: ${applied.join(', ')}`);
      } finally {
        await database.close();
      }
      return;
    }
    case 'api-key':
      return apiKeyCommand(rest, config, logger);
    default:
      throw new UsageError(command === undefined ? 'No command given.' : `Unknown command '${command}'.`);
  }
}

async function serve(config: Config, logger: ReturnType<typeof createLogger>, roles: Roles): Promise<void> {
  const service = await startService(config, logger, roles);
  logger.info(service.address === undefined ? 'Workers running' : `Listening on ${service.address}`);
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info(`${signal} received, stopping`);
    service.close().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, 'failed to stop cleanly');
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

async function apiKeyCommand(args: string[], config: Config, logger: ReturnType<typeof createLogger>): Promise<void> {
  const [action, ...rest] = args;
  const { values, positionals } = parseArgs({ args: rest, options: { name: { type: 'string' } }, allowPositionals: true });
  const database = await openDatabase(config, logger);
  try {
    switch (action) {
      case 'create': {
        if (!values.name) throw new UsageError('api-key create needs --name <name>.');
        const { id, key } = await createApiKey(database.db, values.name);
        console.log(`Created API key ${id} (${values.name}).\nAPI key: ${key}\nIt is stored only as a hash: keep it now.`);
        return;
      }
      case 'list': {
        const keys = await listApiKeys(database.db);
        if (keys.length === 0) console.log('No API keys.');
        for (const key of keys) {
          const state = key.revokedAt ? `revoked ${key.revokedAt.toISOString()}` : 'active';
          console.log(`${key.id}  ${key.createdAt.toISOString()}  ${state}  ${key.name}`);
        }
        return;
      }
      case 'revoke': {
        const id = z.uuid().safeParse(positionals[0]);
        if (!id.success) throw new UsageError('api-key revoke needs the id (a UUID) shown by api-key list.');
        if (!(await revokeApiKey(database.db, id.data))) throw new CommandError(`No active API key has id ${id.data}.`);
        console.log(`Revoked API key ${id.data}.`);
        return;
      }
      default:
        throw new UsageError(`api-key needs create, list or revoke.`);
    }
  } finally {
    await database.close();
  }
}

main(process.argv.slice(2)).catch((error: unknown) => {
  if (error instanceof UsageError) console.error(`${error.message}\n\n${usage}`);
  else if (error instanceof ConfigError || error instanceof CommandError) console.error(error.message);
  else console.error(error);
  process.exit(error instanceof UsageError || error instanceof ConfigError ? 2 : 1);
});
