import fhirpath from 'fhirpath';
import r4 from 'fhirpath/fhir-context/r4';
import { searchParameterDefinitions, type SearchParameterDefinition } from '../../src/fhir/definitions.ts';

/**
 * An in-memory FHIR search evaluator, written independently of src/search to
 * check it: it parses the query itself, evaluates each parameter's FHIRPath
 * expression with the `fhirpath` engine and the R4 model (so choice types,
 * ofType(), where(...) and the FHIR type of every value come from the model,
 * not from the JSON's shape), and applies the FHIR search semantics to the
 * typed values. Slow and simple on purpose.
 *
 * Semantics (the compiler's documented choices):
 * - token: code, system|code, |code, system|; primitives ignore the system;
 *   booleans; Coding; CodeableConcept (any coding); Identifier and ContactPoint
 *   (system, value). :not = no value matches. :text = folded starts-with on
 *   CodeableConcept.text and .coding.display, Coding.display, Identifier.type.text.
 * - string: folded starts-with (default), :exact, :contains (folded substring),
 *   on a string or on the name/address parts of an object.
 * - reference: Type/id, id, :Type=id, against Reference.reference
 *   (relative, at the end of a URL, with or without /_history/n).
 * - uri: equality. number and quantity: exact stored values against the
 *   search value's implicit range (eq, ne) or the value itself.
 * - date: ranges [L, H) of stored values against the search range [low, high).
 * - :missing; AND between parameters, OR between comma values and paths.
 */

// --- query parsing ---------------------------------------------------------------

type Prefix = 'eq' | 'ne' | 'gt' | 'lt' | 'ge' | 'le' | 'sa' | 'eb' | 'ap';
const prefixes: readonly string[] = ['eq', 'ne', 'gt', 'lt', 'ge', 'le', 'sa', 'eb', 'ap'];

/** A decimal as an exact scaled integer: mantissa × 10^-scale. */
type Decimal = { mantissa: bigint; scale: number };

type Value =
  | { kind: 'token'; system?: string; code?: string }
  | { kind: 'text'; text: string }
  | { kind: 'reference'; type?: string; id: string }
  | { kind: 'url'; url: string }
  | { kind: 'uri'; uri: string; modifier?: string }
  | { kind: 'number'; prefix: Prefix; value: Decimal; low: Decimal; high: Decimal }
  | { kind: 'quantity'; prefix: Prefix; value: Decimal; low: Decimal; high: Decimal; system?: string; code?: string }
  | { kind: 'date'; prefix: Prefix; low: bigint; high: bigint }
  /** One value per component of a composite, in order. */
  | { kind: 'composite'; parts: Value[]; components: SearchParameterDefinition[] };

type Criterion = {
  definition: SearchParameterDefinition;
  modifier?: string;
  /** For :missing. */
  missing?: boolean;
  values: Value[];
};

const resultParameters = new Set(['_count', '_sort', '_total', '_include', '_revinclude', '_page_token', '_format']);

const allowedModifiers: Record<string, readonly string[]> = {
  token: ['missing', 'not', 'text'],
  string: ['missing', 'exact', 'contains'],
  reference: ['missing'],
  date: ['missing'],
  number: ['missing'],
  quantity: ['missing'],
  uri: ['missing', 'above', 'below'],
  composite: [],
};

export class OracleQueryError extends Error {
  override name = 'OracleQueryError';
}

function fail(message: string): never {
  throw new OracleQueryError(message);
}

function definitionOf(resourceType: string, code: string): SearchParameterDefinition {
  const found = searchParameterDefinitions.find(
    (definition) => definition.code === code && definition.base.some((base) => base === resourceType || base === 'Resource' || base === 'DomainResource'),
  );
  if (!found) fail(`unknown parameter ${code} for ${resourceType}`);
  if (!(found.type in allowedModifiers)) fail(`${found.type} parameters are not evaluated`);
  return found;
}

/** Splits on `separator` where it is not escaped by a backslash; escapes stay. */
function splitEscaped(text: string, separator: string): string[] {
  const parts: string[] = [];
  let current = '';
  for (let index = 0; index < text.length; index++) {
    const char = text.charAt(index);
    if (char === '\\' && index + 1 < text.length) {
      current += char + text.charAt(index + 1);
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

function removeEscapes(text: string): string {
  let result = '';
  for (let index = 0; index < text.length; index++) {
    const char = text.charAt(index);
    const next = text.charAt(index + 1);
    if (char === '\\' && (next === ',' || next === '|' || next === '$' || next === '\\')) {
      result += next;
      index++;
    } else {
      result += char;
    }
  }
  return result;
}

export function parseQuery(resourceType: string, rawQuery: string): Criterion[] {
  const criteria: Criterion[] = [];
  for (const pair of rawQuery.split('&')) {
    if (pair === '') continue;
    const equals = pair.indexOf('=');
    const key = decodeURIComponent(equals === -1 ? pair : pair.slice(0, equals));
    const raw = decodeURIComponent(equals === -1 ? '' : pair.slice(equals + 1));
    const [name, modifier, ...extra] = key.split(':') as [string, ...string[]];
    if (extra.length > 0) fail(`bad key ${key}`);
    if (resultParameters.has(name)) continue;
    const definition = definitionOf(resourceType, name);
    if (raw === '') fail(`empty value for ${name}`);
    let referenceType: string | undefined;
    if (modifier !== undefined && !allowedModifiers[definition.type]!.includes(modifier)) {
      if (definition.type === 'reference' && /^[A-Z][A-Za-z]+$/.test(modifier) && (definition.target ?? []).includes(modifier)) referenceType = modifier;
      else fail(`modifier ${modifier} on ${name}`);
    }
    if (modifier === 'missing') {
      if (raw !== 'true' && raw !== 'false') fail(`:missing=${raw}`);
      criteria.push({ definition, modifier, missing: raw === 'true', values: [] });
      continue;
    }
    const values = splitEscaped(raw, ',').map((text) =>
      definition.type === 'composite' ? parseComposite(definition, text) : parseValue(definition.type, modifier, referenceType, text),
    );
    criteria.push({ definition, ...(modifier === undefined ? {} : { modifier }), values });
  }
  return criteria;
}

function parseComposite(definition: SearchParameterDefinition, text: string): Value {
  const components = (definition.component ?? []).map((component) => {
    const found = searchParameterDefinitions.find((candidate) => candidate.url === component.definition);
    return found ?? fail(`component ${component.definition}`);
  });
  const parts = splitEscaped(text, '$');
  if (parts.length !== components.length) fail(`composite ${text}`);
  return { kind: 'composite', components, parts: parts.map((part, index) => parseValue(components[index]!.type, undefined, undefined, part)) };
}

function parseValue(type: string, modifier: string | undefined, referenceType: string | undefined, text: string): Value {
  switch (type) {
    case 'token': {
      if (modifier === 'text') return { kind: 'text', text: removeEscapes(text) };
      const parts = splitEscaped(text, '|').map(removeEscapes);
      if (parts.length === 1) return { kind: 'token', code: parts[0]! };
      if (parts.length !== 2) fail(`token ${text}`);
      return parts[1] === '' ? { kind: 'token', system: parts[0]! } : { kind: 'token', system: parts[0]!, code: parts[1]! };
    }
    case 'string':
      return { kind: 'text', text: removeEscapes(text) };
    case 'uri':
      return { kind: 'uri', uri: removeEscapes(text), ...(modifier === undefined ? {} : { modifier }) };
    case 'reference': {
      const value = removeEscapes(text);
      if (referenceType !== undefined) return { kind: 'reference', type: referenceType, id: value };
      const typed = /^([A-Z][A-Za-z]+)\/([A-Za-z0-9.-]{1,64})$/.exec(value);
      if (typed) return { kind: 'reference', type: typed[1]!, id: typed[2]! };
      if (/^[A-Za-z0-9.-]{1,64}$/.test(value)) return { kind: 'reference', id: value };
      if (/^[a-z][a-z0-9+.-]*:\S+$/.test(value)) return { kind: 'url', url: value };
      return fail(`reference ${text} (only Type/id, id and absolute URLs are evaluated)`);
    }
    case 'number': {
      const { prefix, rest } = prefixOf(text);
      return { kind: 'number', prefix, ...searchRange(rest, prefix) };
    }
    case 'quantity': {
      const parts = splitEscaped(text, '|');
      if (parts.length !== 1 && parts.length !== 3) fail(`quantity ${text}`);
      const { prefix, rest } = prefixOf(parts[0]!);
      const system = parts[1] ? removeEscapes(parts[1]) : undefined;
      const code = parts[2] ? removeEscapes(parts[2]) : undefined;
      return { kind: 'quantity', prefix, ...searchRange(rest, prefix), ...(system ? { system } : {}), ...(code ? { code } : {}) };
    }
    case 'date': {
      const { prefix, rest } = prefixOf(text);
      if (prefix === 'ap') fail('ap on dates depends on the time of evaluation');
      const range = searchDateRange(rest);
      return { kind: 'date', prefix, ...range };
    }
  }
  return fail(`type ${type}`);
}

function prefixOf(text: string): { prefix: Prefix; rest: string } {
  const head = text.slice(0, 2);
  return prefixes.includes(head) ? { prefix: head as Prefix, rest: text.slice(2) } : { prefix: 'eq', rest: text };
}

// --- decimals --------------------------------------------------------------------

function parseDecimal(text: string): Decimal {
  const match = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (!match) fail(`not a number: ${text}`);
  const [, sign, whole, fraction = '', exponent = '0'] = match;
  let mantissa = BigInt(`${sign}${whole}${fraction}`);
  let scale = fraction.length - Number(exponent);
  if (scale < 0) {
    mantissa *= 10n ** BigInt(-scale);
    scale = 0;
  }
  return { mantissa, scale };
}

function compareDecimals(a: Decimal, b: Decimal): number {
  const scale = Math.max(a.scale, b.scale);
  const x = a.mantissa * 10n ** BigInt(scale - a.scale);
  const y = b.mantissa * 10n ** BigInt(scale - b.scale);
  return x < y ? -1 : x > y ? 1 : 0;
}

/**
 * v with d decimals stands for [v − 0.5·10^-d, v + 0.5·10^-d); with ap, for
 * [v − |v|/10, v + |v|/10].
 */
function searchRange(text: string, prefix: Prefix): { value: Decimal; low: Decimal; high: Decimal } {
  if (!/^-?\d+(\.\d+)?$/.test(text)) fail(`not a search number: ${text}`);
  const value = parseDecimal(text);
  if (prefix === 'ap') {
    const tenth = { mantissa: value.mantissa < 0n ? -value.mantissa : value.mantissa, scale: value.scale + 1 };
    const scaled = value.mantissa * 10n;
    return { value, low: { mantissa: scaled - tenth.mantissa, scale: tenth.scale }, high: { mantissa: scaled + tenth.mantissa, scale: tenth.scale } };
  }
  const ten = { mantissa: value.mantissa * 10n, scale: value.scale + 1 };
  return { value, low: { mantissa: ten.mantissa - 5n, scale: ten.scale }, high: { mantissa: ten.mantissa + 5n, scale: ten.scale } };
}

type SearchNumber = { value: Decimal; low: Decimal; high: Decimal };

function numberMatches(stored: Decimal, prefix: Prefix, search: SearchNumber): boolean {
  return rangeMatches(stored, stored, prefix, search);
}

/**
 * A stored range [L, H] (undefined: open on that side; a number is [v, v]),
 * as the set of numbers it covers, against the search value: eq when the
 * search range holds all of it, gt when some of it is above the value, sa
 * when all of it is, ap when it meets [low, high].
 */
function rangeMatches(L: Decimal | undefined, H: Decimal | undefined, prefix: Prefix, search: SearchNumber): boolean {
  if (L === undefined && H === undefined) return false;
  const below = (x: Decimal | undefined, y: Decimal) => x !== undefined && compareDecimals(x, y) < 0;
  const above = (x: Decimal | undefined, y: Decimal) => x !== undefined && compareDecimals(x, y) > 0;
  const inRange = L !== undefined && H !== undefined && !below(L, search.low) && below(H, search.high);
  switch (prefix) {
    case 'eq':
      return inRange;
    case 'ne':
      return !inRange;
    case 'gt':
      return H === undefined || above(H, search.value);
    case 'ge':
      return H === undefined || !below(H, search.value);
    case 'lt':
      return L === undefined || below(L, search.value);
    case 'le':
      return L === undefined || !above(L, search.value);
    case 'sa':
      return above(L, search.value);
    case 'eb':
      return below(H, search.value);
    case 'ap':
      return !above(L, search.high) && !below(H, search.low);
  }
}

// --- dates -----------------------------------------------------------------------

const minusInfinity = -(10n ** 30n);
const plusInfinity = 10n ** 30n;
const second = 1_000_000n;

function utcMicros(year: number, month: number, day: number, hour = 0, minute = 0, secondOfMinute = 0): bigint {
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, secondOfMinute, 0);
  return BigInt(date.getTime()) * 1000n;
}

function zoneMinutes(zone: string | undefined): number {
  if (zone === undefined || zone === 'Z') return 0;
  const sign = zone.startsWith('-') ? -1 : 1;
  return sign * (Number(zone.slice(1, 3)) * 60 + Number(zone.slice(4, 6)));
}

function validDay(year: number, month: number, day: number): boolean {
  return month >= 1 && month <= 12 && day >= 1 && day <= new Date(Date.UTC(year, month, 0)).getUTCDate();
}

/** The UTC range a search date covers by its precision; a time without a zone is UTC. */
function searchDateRange(text: string): { low: bigint; high: bigint } {
  const match = /^(\d{4})(?:-(\d{2})(?:-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?(Z|[+-]\d{2}:\d{2})?)?)?)?$/.exec(text);
  if (!match) fail(`not a search date: ${text}`);
  const [, y, mo, d, h, mi, s, fraction, zone] = match;
  const year = Number(y);
  if (mo === undefined) return { low: utcMicros(year, 1, 1), high: utcMicros(year + 1, 1, 1) };
  const month = Number(mo);
  if (!validDay(year, month, d === undefined ? 1 : Number(d))) fail(`invalid date ${text}`);
  if (d === undefined) return { low: utcMicros(year, month, 1), high: utcMicros(year, month + 1, 1) };
  const day = Number(d);
  if (h === undefined) return { low: utcMicros(year, month, day), high: utcMicros(year, month, day + 1) };
  if (Number(h) > 23 || Number(mi) > 59 || Number(s ?? 0) > 59) fail(`invalid time ${text}`);
  const start =
    utcMicros(year, month, day, Number(h), Number(mi), Number(s ?? 0)) -
    BigInt(zoneMinutes(zone)) * 60n * second +
    BigInt((fraction ?? '').padEnd(6, '0') || '0');
  const width = s === undefined ? 60n * second : fraction === undefined ? second : 10n ** BigInt(6 - fraction.length);
  return { low: start, high: start + width };
}

/** The range [L, H) a stored date, dateTime or instant covers, or undefined if it is not one. */
function storedDateRange(text: string): { low: bigint; high: bigint } | undefined {
  let match = /^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$/.exec(text);
  if (match) {
    const [, y, mo, d] = match;
    const year = Number(y);
    if (mo === undefined) return { low: utcMicros(year, 1, 1), high: utcMicros(year + 1, 1, 1) };
    if (!validDay(year, Number(mo), Number(d ?? 1))) return undefined;
    if (d === undefined) return { low: utcMicros(year, Number(mo), 1), high: utcMicros(year, Number(mo) + 1, 1) };
    return { low: utcMicros(year, Number(mo), Number(d)), high: utcMicros(year, Number(mo), Number(d) + 1) };
  }
  match = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?(Z|[+-]\d{2}:\d{2})$/.exec(text);
  if (!match) return undefined;
  const [, y, mo, d, h, mi, s, fraction, zone] = match;
  if (!validDay(Number(y), Number(mo), Number(d)) || Number(h) > 23 || Number(mi) > 59 || Number(s) > 59) return undefined;
  const start =
    utcMicros(Number(y), Number(mo), Number(d), Number(h), Number(mi), Number(s)) -
    BigInt(zoneMinutes(zone)) * 60n * second +
    BigInt((fraction ?? '').padEnd(6, '0') || '0');
  return { low: start, high: start + (fraction === undefined ? second : 1n) };
}

function dateMatches(L: bigint, H: bigint, prefix: Prefix, low: bigint, high: bigint): boolean {
  const eq = L >= low && H <= high;
  switch (prefix) {
    case 'eq':
      return eq;
    case 'ne':
      return L < low || H > high;
    case 'gt':
      return H > high;
    case 'lt':
      return L < low;
    case 'ge':
      return H > high || eq;
    case 'le':
      return L < low || eq;
    case 'sa':
      return L >= high;
    case 'eb':
      return H <= low;
    case 'ap':
      return fail('ap on dates is not judged');
  }
}

// --- text ------------------------------------------------------------------------

/** Lower case without accents (NFD, combining marks U+0300–U+036F removed). */
export function foldText(text: string): string {
  return text
    .normalize('NFD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase();
}

const stringParts = ['family', 'given', 'prefix', 'suffix', 'text', 'line', 'city', 'district', 'state', 'postalCode', 'country'];

function stringsIn(value: unknown): string[] {
  if (typeof value === 'string') return [value];
  if (Array.isArray(value)) return value.filter((item): item is string => typeof item === 'string');
  return [];
}

function textMatches(candidate: string, search: string, mode: string | undefined): boolean {
  if (mode === 'exact') return candidate === search;
  if (mode === 'contains') return foldText(candidate).includes(foldText(search));
  return foldText(candidate).startsWith(foldText(search));
}

// --- values of an expression -----------------------------------------------------

/** A value found by a parameter's expression, with the FHIR type the R4 model gives it. */
type TypedValue = { type: string; data: unknown };

const compiled = new Map<string, (resource: object) => unknown[]>();

/** Top-level `|` branches of a FHIRPath expression. */
function branches(expression: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let quoted = false;
  let start = 0;
  for (let index = 0; index < expression.length; index++) {
    const char = expression.charAt(index);
    if (char === "'") quoted = !quoted;
    else if (!quoted && char === '(') depth++;
    else if (!quoted && char === ')') depth--;
    else if (!quoted && depth === 0 && char === '|') {
      parts.push(expression.slice(start, index).trim());
      start = index + 1;
    }
  }
  parts.push(expression.slice(start).trim());
  return parts;
}

/**
 * fhirpath's resolve() is asynchronous and fetches from a server; the engine
 * reads a reference's type from its relative form `Type/id` only, so
 * `where(resolve() is X)` becomes a test on the reference string.
 */
function withoutResolve(expression: string): string {
  return expression.replace(/\.where\(resolve\(\) is ([A-Z][A-Za-z]+)\)/g, (_, type: string) => `.where(reference.startsWith('${type}/'))`);
}

export function expressionFor(definition: SearchParameterDefinition, resourceType: string): string {
  if (!definition.expression) fail(`${definition.code} has no expression`);
  const own = branches(definition.expression).filter((branch) => {
    const root = /^\(*\s*([A-Z][A-Za-z]*)/.exec(branch)?.[1];
    return root === resourceType || root === 'Resource' || root === 'DomainResource';
  });
  if (own.length === 0) fail(`${definition.code} has no expression for ${resourceType}`);
  return withoutResolve(own.join(' | '));
}

function valuesOf(resource: object, resourceType: string, definition: SearchParameterDefinition): TypedValue[] {
  return nodesOf(resource, resourceType, definition)
    .map(typedValue)
    .filter((value) => value.data !== undefined && value.data !== null);
}

/** The fhirpath nodes a parameter's expression selects (each knows its FHIR type and its path in the model). */
function nodesOf(resource: object, resourceType: string, definition: SearchParameterDefinition): unknown[] {
  const key = `${resourceType}.${definition.code}`;
  let evaluate = compiled.get(key);
  if (!evaluate) {
    const run = fhirpath.compile(expressionFor(definition, resourceType), r4, { resolveInternalTypes: false });
    evaluate = (target) => run(target) as unknown[];
    compiled.set(key, evaluate);
  }
  return evaluate(resource);
}

function typedValue(node: unknown): TypedValue {
  if (node !== null && typeof node === 'object' && 'data' in node) {
    const typed = node as { data: unknown; fhirNodeDataType?: string | null; getTypeInfo?: () => { name: string } };
    // Decimals come as fhirpath's own FP_Decimal, dates possibly as FP_DateTime: back to JSON values.
    const data: unknown = fhirpath.resolveInternalTypes(typed.data);
    return { type: typed.fhirNodeDataType ?? typed.getTypeInfo?.().name ?? typeof data, data };
  }
  return { type: typeof node === 'boolean' ? 'boolean' : typeof node === 'number' ? 'decimal' : 'string', data: node };
}

/** A composite component's values, read from one of the composite's nodes (an Observation.component) by the component's expression. */
function componentValues(node: unknown, expression: string): TypedValue[] {
  const { data, path } = node as { data: unknown; path: string };
  const nodes = fhirpath.evaluate(data, { base: path, expression }, undefined, r4, { resolveInternalTypes: false }) as unknown[];
  return nodes.map(typedValue).filter((value) => value.data !== undefined && value.data !== null);
}

// --- matching --------------------------------------------------------------------

const primitiveStringTypes = new Set([
  'string',
  'code',
  'id',
  'uri',
  'url',
  'canonical',
  'oid',
  'uuid',
  'markdown',
  'base64Binary',
  'date',
  'dateTime',
  'instant',
  'time',
  'System.String',
  'String',
]);
const numberTypes = new Set(['decimal', 'integer', 'positiveInt', 'unsignedInt', 'System.Decimal', 'System.Integer']);
const quantityTypes = new Set(['Quantity', 'SimpleQuantity', 'Duration', 'Age', 'Distance', 'Count', 'MoneyQuantity']);

type Json = Record<string, unknown>;
const asObject = (data: unknown): Json => (data !== null && typeof data === 'object' && !Array.isArray(data) ? (data as Json) : {});

function systemMatches(system: unknown, wanted: string | undefined): boolean {
  if (wanted === undefined) return true;
  if (wanted === '') return system === undefined;
  return system === wanted;
}

function codingMatches(coding: Json, token: { system?: string; code?: string }): boolean {
  return (token.code === undefined || coding.code === token.code) && systemMatches(coding.system, token.system);
}

function tokenMatches({ type, data }: TypedValue, token: { system?: string; code?: string }): boolean {
  if (type === 'boolean' || type === 'System.Boolean') return token.code === String(data);
  if (primitiveStringTypes.has(type)) return token.code !== undefined && data === token.code;
  const object = asObject(data);
  switch (type) {
    case 'Coding':
      return codingMatches(object, token);
    case 'CodeableConcept':
      return Array.isArray(object.coding) && object.coding.some((coding) => codingMatches(asObject(coding), token));
    case 'Identifier':
    case 'ContactPoint':
      return (token.code === undefined || object.value === token.code) && systemMatches(object.system, token.system);
    default:
      return false;
  }
}

function tokenTexts({ type, data }: TypedValue): string[] {
  const object = asObject(data);
  switch (type) {
    case 'CodeableConcept':
      return [...stringsIn(object.text), ...(Array.isArray(object.coding) ? object.coding.flatMap((coding) => stringsIn(asObject(coding).display)) : [])];
    case 'Coding':
      return stringsIn(object.display);
    case 'Identifier':
      return stringsIn(asObject(object.type).text);
    default:
      return [];
  }
}

function stringCandidates({ data }: TypedValue): string[] {
  if (typeof data === 'string') return [data];
  const object = asObject(data);
  return stringParts.flatMap((part) => stringsIn(object[part]));
}

/** `Type/id` named by a relative reference; absolute URLs and versioned references name none. */
function referenceTarget(reference: string): { type: string; id: string } | undefined {
  const match = /^([A-Z][A-Za-z]+)\/([A-Za-z0-9.-]{1,64})$/.exec(reference);
  return match ? { type: match[1]!, id: match[2]! } : undefined;
}

function referenceMatches({ type, data }: TypedValue, wanted: { type?: string; id: string }, targets: readonly string[]): boolean {
  const reference =
    type === 'Reference'
      ? asObject(data).reference
      : // A canonical (or uri) names `Type/id`, possibly with a `|version` after it.
        (type === 'canonical' || type === 'uri') && typeof data === 'string'
        ? data.split('|')[0]
        : // A resource in place (Bundle.entry[0].resource): the model types it as itself.
          typeof asObject(data).resourceType === 'string'
          ? `${String(asObject(data).resourceType)}/${String(asObject(data).id)}`
          : undefined;
  if (typeof reference !== 'string') return false;
  const target = referenceTarget(reference);
  if (target === undefined || target.id !== wanted.id) return false;
  // A bare id stands for any of the parameter's target types.
  return wanted.type === undefined ? targets.length === 0 || targets.includes(target.type) : target.type === wanted.type;
}

/** An absolute URL search value: the reference, the Attachment's url, or the canonical string (of any version when none is asked for). */
function urlMatches({ type, data }: TypedValue, url: string): boolean {
  if (type === 'Reference') return asObject(data).reference === url;
  if (type === 'Attachment') return asObject(data).url === url;
  return typeof data === 'string' && canonicalMatches(data, url);
}

function canonicalMatches(stored: string, wanted: string): boolean {
  const [url, version] = stored.split('|', 2) as [string, string | undefined];
  return stored === wanted || (!wanted.includes('|') && version !== undefined && url === wanted);
}

/** uri: equality (the canonical version rule on canonicals), :below a prefix, :above the value or a parent of it cut at a '/'. */
function uriMatches({ type, data }: TypedValue, { uri, modifier }: { uri: string; modifier?: string }): boolean {
  if (!primitiveStringTypes.has(type) || typeof data !== 'string') return false;
  const equals = (stored: string, wanted: string) => (type === 'canonical' ? canonicalMatches(stored, wanted) : stored === wanted);
  if (modifier === 'below') return data.startsWith(uri);
  if (modifier === 'above') {
    const authorityStart = uri.includes('//') ? uri.indexOf('//') + 2 : 0;
    const parents = [uri];
    for (let index = authorityStart; index < uri.length; index++) {
      if (uri[index] === '/') parents.push(uri.slice(0, index), uri.slice(0, index + 1));
    }
    return parents.some((parent) => parent.length > 0 && equals(data, parent));
  }
  return equals(data, uri);
}

/** A Range's low and high values; a number is the range [v, v]. */
function storedRange({ type, data }: TypedValue): { low?: Decimal; high?: Decimal } | undefined {
  if (numberTypes.has(type)) {
    const value = storedNumber(data);
    return value === undefined ? undefined : { low: value, high: value };
  }
  if (type !== 'Range') return undefined;
  const low = storedNumber(asObject(asObject(data).low).value);
  const high = storedNumber(asObject(asObject(data).high).value);
  return { ...(low === undefined ? {} : { low }), ...(high === undefined ? {} : { high }) };
}

function unitsMatch(quantity: Json, search: { system?: string; code?: string }): boolean {
  return (
    (search.system === undefined || quantity.system === search.system) &&
    (search.code === undefined || quantity.code === search.code || quantity.unit === search.code)
  );
}

function quantityMatches({ type, data }: TypedValue, search: Extract<Value, { kind: 'quantity' }>): boolean {
  const object = asObject(data);
  if (quantityTypes.has(type)) {
    const stored = storedNumber(object.value);
    return stored !== undefined && numberMatches(stored, search.prefix, search) && unitsMatch(object, search);
  }
  if (type === 'Money') {
    const stored = storedNumber(object.value);
    const currencyMatches =
      (search.system === undefined || search.system === 'urn:iso:std:iso:4217') && (search.code === undefined || object.currency === search.code);
    return stored !== undefined && numberMatches(stored, search.prefix, search) && currencyMatches;
  }
  if (type === 'Range') {
    const range = storedRange({ type, data })!;
    const bounds = ['low', 'high'].filter((bound) => object[bound] !== undefined).map((bound) => asObject(object[bound]));
    return rangeMatches(range.low, range.high, search.prefix, search) && bounds.every((bound) => unitsMatch(bound, search));
  }
  return false;
}

function storedNumber(data: unknown): Decimal | undefined {
  return typeof data === 'number' && Number.isFinite(data) ? parseDecimal(String(data)) : undefined;
}

function storedDateRanges({ type, data }: TypedValue): { low: bigint; high: bigint }[] {
  if (typeof data === 'string') {
    const range = type === 'date' || type === 'dateTime' || type === 'instant' ? storedDateRange(data) : undefined;
    return range ? [range] : [];
  }
  const object = asObject(data);
  if (type === 'Period') {
    const start = typeof object.start === 'string' ? storedDateRange(object.start) : undefined;
    const end = typeof object.end === 'string' ? storedDateRange(object.end) : undefined;
    if ((object.start !== undefined && !start) || (object.end !== undefined && !end)) return [];
    return [{ low: start?.low ?? minusInfinity, high: end?.high ?? plusInfinity }];
  }
  if (type === 'Timing') {
    return (Array.isArray(object.event) ? object.event : []).flatMap((event) => {
      const range = typeof event === 'string' ? storedDateRange(event) : undefined;
      return range ? [range] : [];
    });
  }
  return [];
}

function valueMatches(value: TypedValue, search: Value, modifier: string | undefined, targets: readonly string[]): boolean {
  switch (search.kind) {
    case 'token':
      return tokenMatches(value, search);
    case 'text':
      return modifier === 'text'
        ? tokenTexts(value).some((text) => textMatches(text, search.text, undefined))
        : stringCandidates(value).some((text) => textMatches(text, search.text, modifier));
    case 'reference':
      return referenceMatches(value, search, targets);
    case 'url':
      return urlMatches(value, search.url);
    case 'uri':
      return uriMatches(value, search);
    case 'number': {
      const range = storedRange(value);
      return range !== undefined && rangeMatches(range.low, range.high, search.prefix, search);
    }
    case 'quantity':
      return quantityMatches(value, search);
    case 'date':
      return storedDateRanges(value).some((range) => dateMatches(range.low, range.high, search.prefix, search.low, search.high));
    case 'composite':
      return fail('a composite value is matched by criterionMatches');
  }
}

function criterionMatches(resource: object, resourceType: string, criterion: Criterion): boolean {
  if (criterion.definition.type === 'composite') {
    // Some node (one component) in which each component's value matches its part.
    const expressions = (criterion.definition.component ?? []).map((component) => component.expression);
    return nodesOf(resource, resourceType, criterion.definition).some((node) =>
      criterion.values.some(
        (value) =>
          value.kind === 'composite' &&
          value.parts.every((part, index) =>
            componentValues(node, expressions[index]!).some((found) => valueMatches(found, part, undefined, value.components[index]!.target ?? [])),
          ),
      ),
    );
  }
  const values = valuesOf(resource, resourceType, criterion.definition);
  if (criterion.modifier === 'missing') return criterion.missing === (values.length === 0);
  const targets = criterion.definition.target ?? [];
  const found = values.some((value) => criterion.values.some((search) => valueMatches(value, search, criterion.modifier, targets)));
  return criterion.modifier === 'not' ? !found : found;
}

/** Whether `resource` matches the (percent-encoded) search query for `resourceType`. */
export function matchesSearch(resource: object, resourceType: string, rawQuery: string): boolean {
  if ((resource as { resourceType?: unknown }).resourceType !== resourceType) return false;
  return parseQuery(resourceType, rawQuery).every((criterion) => criterionMatches(resource, resourceType, criterion));
}

/** The FHIR types the R4 model gives to what a parameter's expression selects (for coverage checks). */
export function valueTypesOf(resource: object, resourceType: string, code: string): string[] {
  return valuesOf(resource, resourceType, definitionOf(resourceType, code)).map((value) => value.type);
}

/** The `Type/id` a reference parameter's values name (relative references only: what a chain or _has can follow). */
export function referencesOf(resource: object, resourceType: string, code: string): string[] {
  return valuesOf(resource, resourceType, definitionOf(resourceType, code))
    .filter((value) => value.type === 'Reference')
    .map((value) => asObject(value.data).reference)
    .filter((reference): reference is string => typeof reference === 'string' && referenceTarget(reference) !== undefined);
}

/**
 * Whether `resource` matches one chained (`reference[:Type].parameter[:modifier]`)
 * or reverse-chained (`_has:Type:reference:parameter[:modifier]`) clause,
 * judged against the `stored` resources it may relate to.
 */
export function matchesRelated(
  stored: readonly { resourceType: string; id?: string }[],
  resource: { resourceType: string; id?: string },
  key: string,
  value: string,
): boolean {
  const find = (type: string, id: string) => stored.find((candidate) => candidate.resourceType === type && candidate.id === id);
  if (key.startsWith('_has:')) {
    const [, sourceType, reference, inner, modifier] = key.split(':') as [string, string, string, string, string | undefined];
    const innerKey = modifier === undefined ? inner : `${inner}:${modifier}`;
    return stored.some(
      (source) =>
        source.resourceType === sourceType &&
        referencesOf(source, sourceType, reference).includes(`${resource.resourceType}/${resource.id}`) &&
        matchesSearch(source, sourceType, `${innerKey}=${value}`),
    );
  }
  const dot = key.indexOf('.');
  const [reference, namedType] = key.slice(0, dot).split(':') as [string, string | undefined];
  const innerKey = key.slice(dot + 1);
  const inner = innerKey.split(':')[0]!;
  const targets = namedType === undefined ? (definitionOf(resource.resourceType, reference).target ?? []) : [namedType];
  return referencesOf(resource, resource.resourceType, reference).some((text) => {
    const { type, id } = referenceTarget(text)!;
    const target = find(type, id);
    if (!targets.includes(type) || target === undefined) return false;
    const defines = (base: string) => base === type || base === 'Resource' || base === 'DomainResource';
    if (!searchParameterDefinitions.some((definition) => definition.code === inner && definition.base.some(defines))) return false;
    return matchesSearch(target, type, `${innerKey}=${value}`);
  });
}
