import { spawn } from 'node:child_process';
import path from 'node:path';
import type { Command } from 'commander';
import { databaseServer } from '../db/open.ts';
import { CommandError, oneShot } from './command.ts';
import { handleTerminationSignals } from './signals.ts';

/** `psql`: a psql session on the service's database. */
export function registerPsqlCommand(program: Command): void {
  program
    .command('psql')
    .description(`open psql on the service's database (arguments after psql go to psql, e.g. psql -c "select 1")`)
    .argument('[psql-arguments...]')
    .passThroughOptions()
    .allowUnknownOption()
    .action((args: string[]) => psql(args));
}

/**
 * psql on the service's database, its password passed in PGPASSWORD (not on
 * the command line, where `ps` shows it); without psql on the PATH, where to
 * connect another client.
 */
async function psql(args: string[]): Promise<void> {
  const { config, logger } = oneShot();
  const server = await databaseServer(config, logger);
  const url = new URL(server.url);
  const password = decodeURIComponent(url.password);
  url.password = '';
  // psql handles Ctrl-C itself (it cancels the running query); this process waits for it.
  const defaultSignal = handleTerminationSignals((signal) => (signal === 'SIGINT' ? undefined : defaultSignal(signal)));
  try {
    const exitCode = await new Promise<number | null>((resolve, reject) => {
      const child = spawn('psql', [url.toString(), ...args], { stdio: 'inherit', env: { ...process.env, PGPASSWORD: password } });
      child.once('error', reject);
      child.once('close', resolve);
    }).catch((error: unknown) => {
      if ((error as { code?: unknown }).code !== 'ENOENT') throw error;
      const passwordIsIn =
        config.databaseUrl === undefined
          ? path.resolve(config.embeddedDataDir, 'postgres.password')
          : config.databaseDirectUrl === undefined
            ? 'DATABASE_URL'
            : 'DATABASE_DIRECT_URL';
      throw new CommandError(`psql is not installed here. Connect with any PostgreSQL client to:\n  ${url.toString()}\nwith the password in ${passwordIsIn}.`);
    });
    if (exitCode !== 0) throw new CommandError(`psql exited with code ${exitCode}`);
  } finally {
    handleTerminationSignals(defaultSignal);
    await server.release();
  }
}
