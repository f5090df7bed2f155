import { committedAt, deliverAll, subscribe } from '../harness/deliveries.ts';
import type { Bench } from '../harness/dispatcher.ts';
import { cpuPerThousand, perThousand, profiled } from '../harness/profile.ts';
import type { Row } from '../harness/table.ts';

/** The drain's n-th resource as its statement writes it (SQL over a column `n`), before the store stamps its id and meta. */
export const drainedResource = `jsonb_build_object('resourceType', 'Appointment', 'id', 'drain-' || n, 'status', 'booked', 'participant', jsonb_build_array())`;

export async function drain(bench: Bench, rows: number): Promise<Row> {
  const [path] = await subscribe(bench, ['Appointment?status=booked']);
  const ids = Array.from({ length: rows }, (_, n) => `drain-${n + 1}`);
  const { result, profile } = await profiled(bench, () =>
    deliverAll(bench, [path!], ids, () =>
      committedAt(bench.database.pool.query(`INSERT INTO fhir.resources (content) SELECT ${drainedResource} FROM generate_series(1, $1::int) n`, [rows])),
    ),
  );
  return {
    row: `drain: one statement of ${rows.toLocaleString('en-US')} rows, 1 subscription`,
    figure: result.rate,
    unit: 'deliveries/s',
    checks: `${result.checks}\n  where the time goes: ${profile.text}\n  ${cpuPerThousand(profile, rows)}`,
    ...perThousand(profile.databaseCpuSeconds, rows),
  };
}
