import type { Attempt } from '../operations/delivery-overview.ts';

/**
 * The widest a column is padded to: a longer value (a topic with its filters, an endpoint with its
 * query) runs past its column on its own line rather than widening every line.
 */
export const maxColumnWidth = 60;

export function table(header: string[], rows: string[][]): string {
  const widths = header.map((title, column) => Math.max(title.length, Math.min(maxColumnWidth, Math.max(0, ...rows.map((row) => row[column]!.length)))));
  return [header, ...rows]
    .map((row) =>
      row
        .map((cell, column) => cell.padEnd(widths[column]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** `1 call`, `2 calls`. */
export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

/** A recorded call to a subscriber as the cells of a line (`subscriptions show`'s table, `deliveries tail`'s lines). */
export function attemptCells(call: Attempt): string[] {
  return [
    call.startedAt.toISOString(),
    call.id,
    call.kind,
    call.eventNumber === null ? '-' : String(call.eventNumber),
    call.resource ?? '-',
    String(call.attempt),
    call.outcome,
    call.httpStatus === null ? '-' : String(call.httpStatus),
    String(call.durationMs),
    call.error ?? '',
    oneLine(call.responseExcerpt ?? ''),
  ];
}

/** The subscriber's answer on one line of a table: its line breaks as spaces, at most 120 characters. */
function oneLine(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > 120 ? `${flat.slice(0, 119)}…` : flat;
}
