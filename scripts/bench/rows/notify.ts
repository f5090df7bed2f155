import pg from 'pg';
import { wallNow } from '../../support/bench-receiver.ts';
import type { Row } from '../harness/table.ts';

/**
 * What a NOTIFY costs committing writers (PostgreSQL serialises notifying
 * commits): 8 clients committing single-row INSERTs into a table of their
 * own for 3 s, with a pg_notify in each statement, then without.
 */
export async function notifyCost(url: string): Promise<Row> {
  const clients = await Promise.all(
    Array.from({ length: 8 }, async () => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      return client;
    }),
  );
  try {
    await clients[0]!.query('CREATE TABLE IF NOT EXISTS bench_notify_cost (written_at timestamptz DEFAULT now())');
    const commitsPerSecond = async (statement: string) => {
      let commits = 0;
      const deadline = wallNow() + 3_000;
      await Promise.all(
        clients.map(async (client) => {
          for (; wallNow() < deadline; commits++) await client.query(statement);
        }),
      );
      return commits / 3;
    };
    const notifying = await commitsPerSecond(`WITH written AS (INSERT INTO bench_notify_cost DEFAULT VALUES) SELECT pg_notify('bench_notify_cost', '')`);
    const plain = await commitsPerSecond('INSERT INTO bench_notify_cost DEFAULT VALUES');
    return {
      row: 'NOTIFY at commit: 8 writers committing single-row INSERTs, with a NOTIFY each vs none',
      figure: notifying / plain,
      unit: '×',
      checks: `${Math.round(notifying)} notifying commits/s, ${Math.round(plain)} plain commits/s`,
    };
  } finally {
    await Promise.all(clients.map((client) => client.end()));
  }
}
