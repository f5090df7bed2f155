import type { Command } from 'commander';
import { appliedSummary } from '../db/migrations.ts';
import { databaseServer, migrate } from '../db/open.ts';
import { oneShot } from './command.ts';

/** `migrate`: the pending migrations, and nothing else. */
export function registerMigrateCommand(program: Command): void {
  program
    .command('migrate')
    .description('apply pending database migrations and exit')
    .action(async () => {
      const { config, logger } = oneShot();
      const server = await databaseServer(config, logger);
      try {
        const applied = await migrate(server.url, logger);
        console.log(applied.length === 0 ? 'The database is up to date.' : `Applied ${appliedSummary(applied)}.`);
      } finally {
        await server.release();
      }
    });
}
