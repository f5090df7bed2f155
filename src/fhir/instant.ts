/**
 * FHIR instants as the API reads them from a client (`_since`) or from its
 * own page tokens. Checked to be a real date and time here, before any of
 * them reaches a timestamptz cast: JavaScript's Date.parse takes February
 * 30th, PostgreSQL refuses it (a 500 if it got that far).
 */

const instantPattern = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-](\d{2}):(\d{2}))$/;

/** An instant with its time zone (2026-01-02T03:04:05Z, 2026-01-02T04:04:05.5+01:00), on a day that exists. */
export function isInstant(text: string): boolean {
  const parts = instantPattern.exec(text);
  if (parts === null) return false;
  const [year, month, day, hour, minute, second] = parts.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const date = new Date(Date.UTC(year, month - 1, day));
  const offsetHours = parts[9] === undefined ? 0 : Number(parts[9]);
  const offsetMinutes = parts[10] === undefined ? 0 : Number(parts[10]);
  return (
    year >= 1 &&
    date.getUTCFullYear() === year &&
    date.getUTCMonth() === month - 1 &&
    date.getUTCDate() === day &&
    hour < 24 &&
    minute < 60 &&
    second < 60 &&
    offsetHours <= 14 &&
    offsetMinutes < 60
  );
}

/** meta.lastUpdated as the database renders it (fhir.format_instant: microseconds, UTC), on a day that exists. */
export function isStoredInstant(text: string): boolean {
  return /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/.test(text) && isInstant(text);
}

/** A Date as fhir.format_instant writes an instant (microseconds, UTC), so that the API writes every instant one way. */
export function formatInstant(date: Date): string {
  return date.toISOString().replace(/Z$/, '000Z');
}
