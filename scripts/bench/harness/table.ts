import type { ProcessKind } from './dispatcher.ts';
import { options } from './run.ts';

export type Row = {
  row: string;
  figure: number;
  unit: string;
  ratioToCeiling?: number;
  target?: string;
  met?: boolean;
  checks?: string;
  peakRssMiB?: number;
  /** CPU time of the database's backends per 1,000 deliveries (or jobs), in seconds, when the server is on this machine. */
  databaseCpuPerThousand?: number;
};

/**
 * The targets that are ratios to other rows of the run: drain and broad ≥ 2×
 * the graphile-worker ceiling, fan-out ≥ drain, drain ≥ 0.6× the receiver's
 * ceiling (issue 35: the dispatcher near bare HTTP); and the database's CPU per
 * 1,000 deliveries of drain and broad ≤ 0.5× its CPU per 1,000 of the
 * ceiling's no-op jobs (batched claims should cost less than a job each).
 */
export function withTargets(rows: Row[]): Row[] {
  const ceilingRow = rows.find((row) => row.row.startsWith('ceiling: graphile-worker'))!;
  const ceiling = ceilingRow.figure;
  const drainRate = rows.find((row) => row.row.startsWith('drain'))?.figure;
  const databaseCpuRows = rows.flatMap((row): Row[] => {
    const perJob = ceilingRow.databaseCpuPerThousand;
    if (row === ceilingRow || row.databaseCpuPerThousand === undefined || perJob === undefined) return [];
    const ratio = row.databaseCpuPerThousand / perJob;
    return [
      {
        row: `database CPU per 1,000 deliveries, ${row.row.split(':')[0]}, vs per 1,000 no-op jobs`,
        figure: ratio,
        unit: '×',
        target: '≤ 0.5×',
        met: ratio <= 0.5,
        checks: `${row.databaseCpuPerThousand.toFixed(2)} s per 1,000 deliveries, ${perJob.toFixed(2)} s per 1,000 no-op jobs`,
      },
    ];
  });
  const receiverCeiling = rows.find((row) => row.row.startsWith('ceiling: the receiver'))?.figure;
  const drainToReceiver: Row[] =
    drainRate === undefined || receiverCeiling === undefined
      ? []
      : [
          {
            row: 'drain vs the receiver ceiling',
            figure: drainRate / receiverCeiling,
            unit: '×',
            target: '≥ 0.6×',
            met: drainRate / receiverCeiling >= 0.6,
            checks: `${Math.round(drainRate).toLocaleString('en-US')} deliveries/s, ${Math.round(receiverCeiling).toLocaleString('en-US')} bare POSTs/s`,
          },
        ];
  const targeted = [...rows, ...databaseCpuRows].map((row) => {
    if (row.row.startsWith('drain') || row.row.startsWith('broad'))
      return { ...row, ratioToCeiling: row.figure / ceiling, target: '≥ 2× the ceiling', met: row.figure >= 2 * ceiling };
    if (row.row.startsWith('fan-out') && drainRate !== undefined) {
      return { ...row, ratioToCeiling: row.figure / ceiling, target: '≥ drain', met: row.figure >= drainRate };
    }
    return row;
  });
  return [...targeted, ...drainToReceiver];
}

/** One column of the table: every row measured on one server with one kind of dispatcher process, against its own ceilings. */
export type Column = { server: string; kind: ProcessKind; rows: Row[] };

function formatFigure(row: Row): string {
  switch (row.unit) {
    case 'MiB':
      return `${row.figure.toFixed(0)} MiB`;
    case 'ms':
      return `${row.figure.toFixed(1)} ms`;
    case '×':
      return `${row.figure.toFixed(2)}×`;
    default:
      return `${Math.round(row.figure).toLocaleString('en-US')} ${row.unit}`;
  }
}

/** The columns side by side, a row per line (each cell: the figure, its ratio to the column's ceiling, ✓ or ✗ for its target), then each column's details. */
export function print(columns: Column[]): void {
  if (options.json) {
    console.log(JSON.stringify(columns, null, 2));
    return;
  }
  const labels = [...new Set(columns.flatMap((column) => column.rows.map((row) => row.row)))];
  const cell = (row: Row | undefined) =>
    row === undefined
      ? ''
      : [formatFigure(row), row.ratioToCeiling === undefined ? '' : `(${row.ratioToCeiling.toFixed(2)}×)`, row.met === undefined ? '' : row.met ? '✓' : '✗']
          .filter(Boolean)
          .join(' ');
  const table = [
    ['row', ...columns.map((column) => `${column.server}, ${column.kind}`), 'target'],
    ...labels.map((label) => {
      const rows = columns.map((column) => column.rows.find((row) => row.row === label));
      return [label, ...rows.map(cell), rows.find((row) => row?.target !== undefined)?.target ?? ''];
    }),
  ];
  const widths = table[0]!.map((_, index) => Math.max(...table.map((line) => line[index]!.length)));
  console.log("(figure, its ratio to the same column's graphile-worker ceiling, ✓ target met, ✗ not met)");
  for (const line of table)
    console.log(
      line
        .map((text, index) => text.padEnd(widths[index]!))
        .join('  ')
        .trimEnd(),
    );
  for (const column of columns) {
    console.log(`\n${column.server}, ${column.kind}:`);
    for (const row of column.rows) {
      const details = [
        row.checks,
        row.peakRssMiB === undefined ? undefined : `peak RSS of the ${column.kind} process${/^\d/.test(row.row) ? 'es' : ''} ${row.peakRssMiB.toFixed(0)} MiB`,
      ].filter((detail) => detail !== undefined);
      if (details.length > 0) console.log(`  ${row.row.split(':')[0]}: ${details.join('; ')}`);
    }
  }
}
