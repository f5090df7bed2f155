import { randomBytes } from 'node:crypto';
import { Command } from 'commander';
import pino from 'pino';

export const options = new Command('npm run bench --')
  .description('The delivery engine against its ceilings, in one run.')
  .option('--json', 'print the figures as JSON')
  .option('--rows <n>', 'rows written by the drain statement', '20000')
  .option('--backlog <n>', 'events queued before the workers start', '100000')
  .option('--history <n>', 'settled events (and calls) the history row adds to the log', '1000000')
  .option('--outage-seconds <n>', 'how long the outage row keeps its 50 subscribers failing', '60')
  .option('--soak-minutes <n>', 'how long the soak row writes with its snapshot held (issue 35 asks for 40)', '1')
  .option('--only <rows>', 'only the rows whose names start with these, comma-separated (the ceilings always run)')
  .option(
    '--servers <servers>',
    "embedded (a throwaway PostgreSQL of this package's), url (DATABASE_URL's), or both, comma-separated",
    process.env.DATABASE_URL ? 'embedded,url' : 'embedded',
  )
  .option(
    '--processes <kinds>',
    'worker (the dispatcher in `worker` processes), serve (API and workers in one process, as `npm start`), or both',
    'worker,serve',
  )
  .parse()
  .opts<{
    json?: boolean;
    rows: string;
    backlog: string;
    history: string;
    outageSeconds: string;
    soakMinutes: string;
    only?: string;
    servers: string;
    processes: string;
  }>();

/** Whether a row is to be measured in this run (--only). */
export const wanted = (name: string) => options.only === undefined || options.only.split(',').some((prefix) => name.startsWith(prefix.trim()));

export const secret = randomBytes(16).toString('hex');
/** One key for every dispatcher phase: a subscription made in one is read in the next. */
export const secretsKey = randomBytes(32);

export const logger = pino({ level: 'warn' }, pino.destination(2));
