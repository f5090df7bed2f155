import { Command, CommanderError } from 'commander';
import { ConfigError } from '../config/index.ts';
import { describeError } from '../config/logger.ts';
import { registerApiKeyCommands } from './api-key.ts';
import { CommandError } from './command.ts';
import { registerDeliveriesCommands } from './deliveries.ts';
import { registerLoadCommand } from './load.ts';
import { registerMigrateCommand } from './migrate.ts';
import { registerPsqlCommand } from './psql.ts';
import { registerServeCommands } from './serve.ts';
import { registerSubscriptionsCommands } from './subscriptions.ts';
import { registerTopicsCommands } from './topics.ts';

/*
 * One file per command group, each registering its commands. Each command's
 * own modules are loaded when it runs (the groups' dynamic imports): a
 * one-shot command (a load above all) starts without the code of the others,
 * nor the API's and the dispatcher's (src/service.ts, loaded by serve).
 */

/**
 * The command line (commander: per-command --help, `help <command>`, usage
 * errors). Everything it prints for people is plain text; only the serving
 * commands log, as JSON lines or, on a terminal, one readable line per event.
 */
function commandLine(): Command {
  const program = new Command('npm run cli --')
    .description('FHIR R4 webhook subscription service. Without DATABASE_URL every command uses the embedded PostgreSQL in EMBEDDED_DATA_DIR.')
    .enablePositionalOptions()
    .showHelpAfterError()
    .exitOverride();
  registerServeCommands(program);
  registerMigrateCommand(program);
  registerApiKeyCommands(program);
  registerLoadCommand(program);
  registerSubscriptionsCommands(program);
  registerTopicsCommands(program);
  registerDeliveriesCommands(program);
  registerPsqlCommand(program);
  return program;
}

/**
 * Exit codes: 0 done (help included), 1 the command failed, 2 the command
 * line or the configuration is wrong. Errors are printed as one message,
 * never as a dump of the objects they carry.
 */
async function main(): Promise<number> {
  try {
    await commandLine().parseAsync(process.argv);
    return 0;
  } catch (error) {
    // commander has already printed its own message (or the help).
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
    if (error instanceof ConfigError) {
      console.error(error.message);
      return 2;
    }
    console.error(error instanceof CommandError ? error.message : `Failed: ${describeError(error)}`);
    return error instanceof CommandError ? error.exitCode : 1;
  }
}

process.exitCode = await main();
