import { isResourceType } from '../fhir/definitions.ts';
import { badRequest } from '../fhir/outcome.ts';
import type { CompositeParameter, Modifier, SimpleParameter } from './parameters.ts';

/**
 * One search value, parsed for its parameter's type. Dates become UTC
 * half-open ranges to the microsecond; numbers keep their decimal text, so
 * implicit precision ranges are exact.
 */

export type Prefix = 'eq' | 'ne' | 'gt' | 'lt' | 'ge' | 'le' | 'sa' | 'eb' | 'ap';

export type SearchValue =
  | { kind: 'missing'; missing: boolean }
  /** system: undefined = any system, '' = no system; code: undefined = any code (`system|`). */
  | { kind: 'token'; system?: string; code?: string }
  /** A string search, or a token's :text. */
  | { kind: 'text'; text: string }
  /** `Type/id`, or a bare `id` (type undefined). */
  | { kind: 'reference'; type?: string; id: string }
  /** An absolute URL: a reference or canonical written in full. */
  | { kind: 'url'; url: string }
  /** [low, high) as `YYYY-MM-DDThh:mm:ss.ffffffZ` (with `ap`, widened by 10% of the date's distance from now). */
  | { kind: 'date'; prefix: Prefix; low: string; high: string }
  /**
   * value and its range as decimal strings: the implicit precision range
   * [low, high), or with `ap` the closed range of ±10% of the value.
   */
  | { kind: 'number'; prefix: Prefix; value: string; low: string; high: string }
  | { kind: 'quantity'; prefix: Prefix; value: string; low: string; high: string; system?: string; code?: string }
  | { kind: 'uri'; uri: string }
  /** A composite's parts, one per component, in order. */
  | { kind: 'composite'; parts: SearchValue[] };

const prefixes: readonly Prefix[] = ['eq', 'ne', 'gt', 'lt', 'ge', 'le', 'sa', 'eb', 'ap'];

export function parseValue(parameter: SimpleParameter, modifier: Modifier | undefined, text: string): SearchValue {
  const name = parameter.code;
  switch (parameter.type) {
    case 'token':
      return modifier === 'text' ? { kind: 'text', text: unescape(text) } : parseToken(text);
    case 'string':
      return { kind: 'text', text: unescape(text) };
    case 'uri':
      return { kind: 'uri', uri: unescape(text) };
    case 'reference':
      return parseReference(name, typeof modifier === 'object' ? modifier.type : undefined, unescape(text));
    case 'date':
      return parseDate(name, text);
    case 'number': {
      const { prefix, rest } = splitPrefix(text);
      return { kind: 'number', prefix, ...parseDecimal(name, rest, prefix) };
    }
    case 'quantity':
      return parseQuantity(name, text);
  }
}

/** `part$part…`: one part per component, each parsed for its component's type. */
export function parseComposite(parameter: CompositeParameter, text: string): SearchValue {
  const components = parameter.roots[0]!.components;
  const parts = splitUnescaped(text, '$');
  if (parts.length !== components.length) {
    throw badRequest(
      `'${parameter.code}' takes ${components.length} values separated by '$' (${components.map((component) => component.code).join('$')}), not '${text}'`,
    );
  }
  return { kind: 'composite', parts: parts.map((part, index) => parseValue(components[index]!, undefined, part)) };
}

function parseToken(text: string): SearchValue {
  const parts = splitUnescaped(text, '|');
  if (parts.length === 1) return { kind: 'token', code: unescape(parts[0]!) };
  if (parts.length > 2) throw badRequest(`Token '${text}' has more than one unescaped '|'`);
  const [system, code] = parts.map(unescape) as [string, string];
  return { kind: 'token', system, ...(code === '' ? {} : { code }) };
}

function parseReference(name: string, modifierType: string | undefined, text: string): SearchValue {
  if (modifierType !== undefined) {
    if (!/^[A-Za-z0-9.-]{1,64}$/.test(text)) throw badRequest(`'${name}:${modifierType}' takes an id, not '${text}'`);
    return { kind: 'reference', type: modifierType, id: text };
  }
  const typed = /^([A-Z][A-Za-z]+)\/([A-Za-z0-9.-]{1,64})$/.exec(text);
  if (typed && isResourceType(typed[1]!)) return { kind: 'reference', type: typed[1]!, id: typed[2]! };
  if (/^[A-Za-z0-9.-]{1,64}$/.test(text)) return { kind: 'reference', id: text };
  if (/^[a-z][a-z0-9+.-]*:\S+$/.test(text)) return { kind: 'url', url: text };
  throw badRequest(`'${text}' is not a reference (Type/id, id or an absolute URL) for '${name}'`);
}

function splitPrefix(text: string): { prefix: Prefix; rest: string } {
  const candidate = text.slice(0, 2);
  if (prefixes.includes(candidate as Prefix)) return { prefix: candidate as Prefix, rest: text.slice(2) };
  return { prefix: 'eq', rest: text };
}

/**
 * A decimal and its range: the implicit precision range ("100" is [99.5, 100.5),
 * "1.50" is [1.495, 1.505)), or for `ap` ±10% of the value, as R4 recommends
 * ("ap100" is [90, 110]).
 */
export function parseDecimal(name: string, text: string, prefix: Prefix): { value: string; low: string; high: string } {
  const match = /^(-?)(\d+)(?:\.(\d+))?$/.exec(text);
  if (!match) throw badRequest(`'${text}' is not a number for '${name}'`);
  const [, sign, whole, fraction = ''] = match;
  const scale = fraction.length;
  const scaled = BigInt(`${sign}${whole}${fraction}`) * 10n;
  const spread = prefix === 'ap' ? (scaled < 0n ? -scaled : scaled) / 10n : 5n;
  return { value: text, low: formatScaled(scaled - spread, scale + 1), high: formatScaled(scaled + spread, scale + 1) };
}

function formatScaled(value: bigint, scale: number): string {
  const negative = value < 0n;
  const digits = (negative ? -value : value).toString().padStart(scale + 1, '0');
  const text = `${digits.slice(0, digits.length - scale)}.${digits.slice(digits.length - scale)}`;
  return negative ? `-${text}` : text;
}

function parseQuantity(name: string, text: string): SearchValue {
  const parts = splitUnescaped(text, '|');
  if (parts.length !== 1 && parts.length !== 3) throw badRequest(`Quantity '${text}' must be number, or number|system|code`);
  const { prefix, rest } = splitPrefix(parts[0]!);
  const system = parts[1] === undefined || parts[1] === '' ? undefined : unescape(parts[1]);
  const code = parts[2] === undefined || parts[2] === '' ? undefined : unescape(parts[2]);
  return { kind: 'quantity', prefix, ...parseDecimal(name, rest, prefix), ...(system ? { system } : {}), ...(code ? { code } : {}) };
}

const datePattern = /^(\d{4})(?:-(\d{2})(?:-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?(Z|[+-]\d{2}:\d{2})?)?)?)?$/;

/** A date search value as the UTC range its precision covers. A time without a zone is taken as UTC. */
function parseDate(name: string, text: string): SearchValue {
  const { prefix, rest } = splitPrefix(text);
  const match = datePattern.exec(rest);
  if (!match) throw badRequest(`'${text}' is not a date for '${name}' (YYYY, YYYY-MM, YYYY-MM-DD or YYYY-MM-DDThh:mm[:ss[.f]][Z|±hh:mm])`);
  const [, year, month, day, hour, minute, second, fraction, zone] = match;
  const y = Number(year);
  const mo = month === undefined ? 1 : Number(month);
  const d = day === undefined ? 1 : Number(day);
  if (mo < 1 || mo > 12 || d < 1 || d > daysInMonth(y, mo) || Number(hour ?? 0) > 23 || Number(minute ?? 0) > 59 || Number(second ?? 0) > 59) {
    throw badRequest(`'${text}' is not a valid date for '${name}'`);
  }
  const offsetMinutes = zone === undefined || zone === 'Z' ? 0 : (zone.startsWith('-') ? -1 : 1) * (Number(zone.slice(1, 3)) * 60 + Number(zone.slice(4, 6)));
  const micros = fraction === undefined ? 0 : Number(fraction.slice(0, 6).padEnd(6, '0'));
  const start = BigInt(Date.UTC(y, mo - 1, d, Number(hour ?? 0), Number(minute ?? 0) - offsetMinutes, Number(second ?? 0))) * 1000n + BigInt(micros);
  let end: bigint;
  if (month === undefined) end = BigInt(Date.UTC(y + 1, 0, 1)) * 1000n;
  else if (day === undefined) end = BigInt(Date.UTC(y, mo, 1)) * 1000n;
  else if (hour === undefined) end = BigInt(Date.UTC(y, mo - 1, d + 1)) * 1000n;
  else if (second === undefined) end = start + 60_000_000n;
  else if (fraction === undefined) end = start + 1_000_000n;
  else end = start + 10n ** BigInt(6 - Math.min(fraction.length, 6));
  if (prefix === 'ap') {
    // R4's suggestion for dates: approximately is within 10% of the gap between now and the date.
    const gap = BigInt(Date.now()) * 1000n - start;
    const margin = (gap < 0n ? -gap : gap) / 10n;
    const clamp = (micros: bigint) => (micros < firstMicro ? firstMicro : micros > lastMicro ? lastMicro : micros);
    return { kind: 'date', prefix, low: formatMicros(clamp(start - margin)), high: formatMicros(clamp(end + margin)) };
  }
  return { kind: 'date', prefix, low: formatMicros(start), high: formatMicros(end) };
}

/** 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z: the dates FHIR can write. */
const firstMicro = -62_135_596_800_000_000n;
const lastMicro = 253_402_300_799_999_999n;

function daysInMonth(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

/** Microseconds since the epoch as `YYYY-MM-DDThh:mm:ss.ffffffZ`. */
export function formatMicros(micros: bigint): string {
  const extra = ((micros % 1000n) + 1000n) % 1000n;
  const iso = new Date(Number((micros - extra) / 1000n)).toISOString(); // YYYY-MM-DDThh:mm:ss.mmmZ
  return `${iso.slice(0, 23)}${extra.toString().padStart(3, '0')}Z`;
}

/** Splits on a separator not preceded by a backslash; escapes stay for unescape(). */
export function splitUnescaped(text: string, separator: string): string[] {
  const parts: string[] = [];
  let current = '';
  for (let index = 0; index < text.length; index++) {
    const char = text[index]!;
    if (char === '\\' && index + 1 < text.length) {
      current += char + text[index + 1];
      index++;
    } else if (char === separator) {
      parts.push(current);
      current = '';
    } else {
      current += char;
    }
  }
  parts.push(current);
  return parts;
}

/** Removes FHIR search escapes: `\,` `\|` `\$` `\\`. */
export function unescape(text: string): string {
  return text.replace(/\\([,|$\\])/g, '$1');
}
