import type { ElementPath, PathStep } from './element-paths.ts';
import type { CompositeParameter, SimpleParameter } from './parameters.ts';
import type { Filter, RelatedFilter } from './query.ts';
import type { Prefix, SearchValue } from './values.ts';
import { formatMicros } from './values.ts';

/**
 * Compiles search filters into one SQL/JSON path predicate over a resource's
 * JSON, for `content @@ '<predicate>'` (GIN-indexed) in searches and
 * `jsonb_path_match(content, '<predicate>')` in triggers. Repeated parameters
 * are `&&`, comma values `||`. Values are matched by their JSON shape, so the
 * same rules serve code, Coding, CodeableConcept and Identifier; string,
 * HumanName and Address; date, dateTime, instant, Period and Timing.
 */
export function compileFilters(filters: readonly Filter[]): string | null {
  if (filters.length === 0) return null;
  return filters.map(compileFilter).join(' && ');
}

function compileFilter(filter: Filter): string {
  const { parameter, modifier, values } = filter;
  if (parameter.type === 'composite') return compositeCondition(parameter, values);
  const first = values[0];
  if (first?.kind === 'missing') {
    const present = anyOf(parameter.paths.map((path) => `exists(${accessor(path)})`));
    return first.missing ? `!${present}` : present;
  }
  const found = valuesFound('$', parameter, modifier, values);
  return modifier === 'not' ? `!${found}` : found;
}

/**
 * What a criteria requires of related resources, as fhir.related_resources_match
 * (db/migrations/0009_chained_criteria.sql) reads it: each condition's
 * jsonpaths as text.
 */
export type RelatedCondition =
  | { chain: { references: string[]; targets: { type: string; match: string | null }[] } }
  | { has: { sourceType: string; referencing: string; match: string | null } };

export function compileRelated(related: readonly RelatedFilter[]): RelatedCondition[] {
  return related.map((condition): RelatedCondition => {
    if (condition.kind === 'chain') {
      return {
        chain: {
          references: referenceStrings(condition.reference),
          targets: condition.targets.map(({ type, filter }) => ({ type, match: compileFilters([filter]) })),
        },
      };
    }
    return {
      has: {
        sourceType: condition.sourceType,
        referencing: anyOf(literalReferencePaths(condition.reference).map((path) => `exists(${accessor(path)} ? (@."reference" == $reference))`)),
        match: compileFilters([condition.filter]),
      },
    };
  });
}

/** The paths of a reference parameter that hold a Reference: only a Reference names its target by Type/id (a canonical names a url). */
function literalReferencePaths(parameter: SimpleParameter): ElementPath[] {
  return parameter.paths.filter((path) => path.at(-1)?.types?.includes('Reference') ?? true);
}

/** jsonpaths selecting the reference strings ("Patient/1") of a reference parameter, one per path. */
export function referenceStrings(parameter: SimpleParameter): string[] {
  return literalReferencePaths(parameter).map((path) => `${accessor(path)}."reference"`);
}

/** Whether some value at the parameter's paths, from `root` ('$' or a composite's '@'), matches one of `values`. */
function valuesFound(root: string, parameter: SimpleParameter, modifier: Filter['modifier'], values: readonly SearchValue[]): string {
  return anyOf(
    parameter.paths.map((path) => {
      // The element's FHIR types, when known, narrow the JSON shapes worth testing.
      const types = path.at(-1)?.types;
      const condition = anyOf(values.map((value) => valueCondition(value, modifier, types, parameter.targets)));
      return `exists(${accessor(path, root)} ? (${condition}))`;
    }),
  );
}

/** Some root element (one Observation.component) in which every component matches its part of one value. */
function compositeCondition(parameter: CompositeParameter, values: readonly SearchValue[]): string {
  return anyOf(
    parameter.roots.flatMap(({ path, components }) =>
      values.map((value) => {
        if (value.kind !== 'composite') throw new Error('a composite parameter takes composite values');
        const all = allOf(components.map((component, index) => valuesFound('@', component, undefined, [value.parts[index]!])));
        return `exists(${accessor(path)} ? (${all}))`;
      }),
    ),
  );
}

/** Element types, or undefined when the definitions do not say (any shape may appear). */
type Types = readonly string[] | undefined;

/**
 * The alternatives for the types the element may have: all of them when its
 * types are unknown, `false` when none fits (a date parameter over Age, a
 * quantity over SampledData: such a value is never a match).
 */
function forTypes(types: Types, alternatives: [applies: (type: string) => boolean, condition: string][]): string[] {
  const fitting = types === undefined ? alternatives : alternatives.filter(([applies]) => types.some(applies));
  return fitting.length > 0 ? fitting.map(([, condition]) => condition) : [never];
}

/** FHIR primitive types are the lower-case ones (code, string, dateTime, ...). */
const isPrimitive = (type: string) => /^[a-z]/.test(type);

/** `$."participant"."actor" ? (...)`: lax mode walks arrays on its own. */
export function accessor(path: ElementPath, root = '$'): string {
  return `${root}${path.map(stepAccessor).join('')}`;
}

function stepAccessor(step: PathStep): string {
  let text = `.${key(step.name)}`;
  if (step.index !== undefined) text += `[${step.index}]`;
  if (step.filter?.kind === 'reference-to') {
    text += ` ? (${anyOf(step.filter.types.map((type) => `@."reference" starts with ${literal(`${type}/`)}`))})`;
  } else if (step.filter?.kind === 'child-equals') {
    text += ` ? (@.${key(step.filter.child)} == ${literal(step.filter.value)})`;
  }
  return text;
}

function valueCondition(value: SearchValue, modifier: Filter['modifier'], types: Types, targets: readonly string[]): string {
  switch (value.kind) {
    case 'token':
      return tokenCondition(value, types);
    case 'text':
      return modifier === undefined || modifier === 'exact' || modifier === 'contains'
        ? stringCondition(value.text, modifier ?? 'starts-with', types)
        : tokenTextCondition(value.text);
    case 'reference':
      return referenceCondition(value.type === undefined ? targets : [value.type], value.id, types);
    case 'url':
      return urlCondition(value.url, types);
    case 'uri':
      return uriCondition(value.uri, modifier, types);
    case 'number':
      return numberCondition(value.prefix, value, types);
    case 'quantity':
      return quantityCondition(value, types);
    case 'date':
      return dateCondition(value.prefix, value.low, value.high, types);
    case 'missing':
    case 'composite':
      throw new Error(`${value.kind} values are compiled by compileFilter`);
  }
}

// --- token -----------------------------------------------------------------

function tokenCondition({ system, code }: { system?: string; code?: string }, types: Types): string {
  const systemTest = (item: string) => (system === undefined ? [] : system === '' ? [`!exists(${item}."system")`] : [`${item}."system" == ${literal(system)}`]);
  const coding = (item: string) => allOf([...(code === undefined ? [] : [`${item}."code" == ${literal(code)}`]), ...systemTest(item)]);
  const identifier = allOf([...(code === undefined ? [] : [`@."value" == ${literal(code)}`]), ...systemTest('@')]);
  return anyOf(
    forTypes(types, [
      // A primitive code, id, string or boolean has no system of its own: the system part is not checked.
      ...(code === 'true' || code === 'false' ? [[(type: string) => type === 'boolean', `@ == ${code}`] as [(type: string) => boolean, string]] : []),
      ...(code === undefined ? [] : [[isPrimitive, `@ == ${literal(code)}`] as [(type: string) => boolean, string]]),
      [(type) => type === 'Coding', coding('@')],
      [(type) => type === 'CodeableConcept', `exists(@."coding" ? (${coding('@')}))`],
      [(type) => type === 'Identifier' || type === 'ContactPoint', identifier],
    ]),
  );
}

/** :text on a token: CodeableConcept.text, a Coding's display, an Identifier's type text; starts-with, folded. */
function tokenTextCondition(text: string): string {
  const pattern = literal(`^${foldedPattern(text)}`);
  return anyOf(['@."text"', '@."display"', '@."coding"."display"', '@."type"."text"'].map((item) => `${item} like_regex ${pattern}`));
}

// --- string ----------------------------------------------------------------

/** The parts of a HumanName and of an Address that a string search reads. */
const humanNameParts = ['family', 'given', 'prefix', 'suffix', 'text'];
const addressParts = ['line', 'city', 'district', 'state', 'postalCode', 'country', 'text'];

/** The parts read for the complex types a parameter's values may have (unknown types: those of both). */
function stringPartsOf(types: Types): string[] {
  const parts = new Set<string>();
  for (const type of types ?? ['HumanName', 'Address']) {
    if (type !== 'Address' && !isPrimitive(type)) for (const part of humanNameParts) parts.add(part);
    if (type !== 'HumanName' && !isPrimitive(type)) for (const part of addressParts) parts.add(part);
  }
  return [...parts];
}

function stringCondition(text: string, mode: 'starts-with' | 'exact' | 'contains', types: Types): string {
  // Built once, used for each of the parts: a long value's pattern is large (a class per letter).
  const expected = mode === 'exact' ? literal(text) : literal(`${mode === 'starts-with' ? '^' : ''}${foldedPattern(text)}`);
  const test = (item: string) => `${item} ${mode === 'exact' ? '==' : 'like_regex'} ${expected}`;
  return anyOf(
    forTypes(types, [
      [isPrimitive, `(@.type() == "string" && ${test('@')})`],
      [(type) => !isPrimitive(type), anyOf(stringPartsOf(types).map((part) => test(`@.${key(part)}`)))],
    ]),
  );
}

/**
 * A regular expression that matches `text` ignoring case and accents: each
 * letter becomes the class of the characters that fold to it (é, É, e, E for
 * e), and combining marks in the data are skipped.
 */
export function foldedPattern(text: string): string {
  return [...fold(text)].map((char) => foldedLetterPatterns.get(char) ?? escapeRegex(char)).join('');
}

/**
 * Lower case without accents: what both sides are compared as. Letter by
 * letter, so that context rules (a word-final Σ lowering to ς) do not apply,
 * and with ς as σ: both are the same letter.
 */
export function fold(text: string): string {
  return [...text.normalize('NFD').replace(/[\u0300-\u036f]/g, '')]
    .map((char) => char.toLowerCase())
    .join('')
    .replaceAll('ς', 'σ');
}

/** For each folded letter, every character of the Latin, Greek (Extended included) and Cyrillic blocks that folds to it. */
const foldsTo: ReadonlyMap<string, Set<string>> = (() => {
  const table = new Map<string, Set<string>>();
  const ranges: [number, number][] = [
    [0x41, 0x7a],
    [0xc0, 0x24f],
    [0x370, 0x3ff],
    [0x400, 0x4ff],
    [0x1e00, 0x1eff],
    [0x1f00, 0x1fff],
  ];
  for (const [from, to] of ranges) {
    for (let codePoint = from; codePoint <= to; codePoint++) {
      const char = String.fromCodePoint(codePoint);
      const folded = fold(char);
      if (folded.length !== 1 || !/\p{L}/u.test(folded)) continue;
      const variants = table.get(folded) ?? new Set([folded]);
      variants.add(char);
      table.set(folded, variants);
    }
  }
  return table;
})();

/** Each folded letter's class, and the combining marks after it, made once. */
const foldedLetterPatterns: ReadonlyMap<string, string> = new Map(
  [...foldsTo].map(([letter, variants]) => [letter, `[${[...variants].map(escapeInClass).join('')}][\\u0300-\\u036f]*`]),
);

function escapeRegex(char: string): string {
  return /[\\^$.|?*+()[\]{}]/.test(char) ? `\\${char}` : char;
}

function escapeInClass(char: string): string {
  return /[\\\]^-]/.test(char) ? `\\${char}` : char;
}

// --- reference -------------------------------------------------------------

/**
 * A reference to `Type/id` is its relative form, compared by equality: GIN can
 * serve it, and it needs no regular expression (PostgreSQL caches only 32
 * compiled ones per connection, which a trigger matching many subscriptions
 * would thrash). A bare id means any of the parameter's target types. The
 * element is a Reference (its `reference`), a canonical or uri (the string,
 * with any `|version`), or a resource in place (Bundle's first entry).
 */
function referenceCondition(targets: readonly string[], id: string, types: Types): string {
  const named = targets.map((type) => `${type}/${id}`);
  const anyType = literal(`^[A-Z][A-Za-z]+/${escapeRegexText(id)}$`);
  return anyOf(
    forTypes(types, [
      [
        (type) => type === 'Reference',
        named.length === 0 ? `(@."reference" like_regex ${anyType})` : anyOf(named.map((reference) => `@."reference" == ${literal(reference)}`)),
      ],
      [
        isCanonical,
        named.length === 0
          ? `(@ like_regex ${literal(`^[A-Z][A-Za-z]+/${escapeRegexText(id)}(\\|.*)?$`)})`
          : anyOf(named.map((reference) => canonicalEquals(reference))),
      ],
      [
        (type) => type === 'Resource',
        `(@."id" == ${literal(id)}${named.length === 0 ? '' : ` && ${anyOf(targets.map((type) => `@."resourceType" == ${literal(type)}`))}`})`,
      ],
    ]),
  );
}

/** An absolute URL: a Reference, canonical, uri or Attachment written exactly so (a canonical of any version when none is given). */
function urlCondition(url: string, types: Types): string {
  return anyOf(
    forTypes(types, [
      [(type) => type === 'Reference', `@."reference" == ${literal(url)}`],
      [isCanonical, canonicalEquals(url)],
      [(type) => type === 'Attachment', `@."url" == ${literal(url)}`],
    ]),
  );
}

/** Canonicals and uris hold `url` or `url|version`: a search value without a version matches every version. */
const isCanonical = (type: string) => type === 'canonical' || type === 'uri';

function canonicalEquals(url: string): string {
  if (url.includes('|')) return `@ == ${literal(url)}`;
  return `(@ == ${literal(url)} || @ starts with ${literal(`${url}|`)})`;
}

// --- uri -------------------------------------------------------------------

/**
 * A uri parameter: equality, the canonical version rule, :below (the stored
 * uri starts with the value) and :above (the stored uri is the value or one
 * of its parents, cut at a '/').
 */
function uriCondition(uri: string, modifier: Filter['modifier'], types: Types): string {
  const equals = (candidate: string) => (types?.includes('canonical') ? canonicalEquals(candidate) : `@ == ${literal(candidate)}`);
  if (modifier === 'below') return `(@ starts with ${literal(uri)})`;
  if (modifier === 'above') return anyOf(parentsOf(uri).map(equals));
  return equals(uri);
}

/** `http://a.org/fhir/ValueSet/1` → itself, `http://a.org/fhir/ValueSet/`, `…/ValueSet`, `…/fhir/`, `…/fhir`, `http://a.org/`, `http://a.org`. */
export function parentsOf(uri: string): string[] {
  const parents = new Set([uri]);
  const start = uri.indexOf('//') === -1 ? 0 : uri.indexOf('//') + 2;
  for (let slash = uri.lastIndexOf('/'); slash >= start; slash = uri.lastIndexOf('/', slash - 1)) {
    parents.add(uri.slice(0, slash + 1));
    if (slash > start) parents.add(uri.slice(0, slash));
    if (slash === 0) break;
  }
  return [...parents];
}

function escapeRegexText(text: string): string {
  return [...text].map(escapeRegex).join('');
}

// --- number and quantity ---------------------------------------------------

type Decimal = { value: string; low: string; high: string };

const quantityTypes = new Set(['Quantity', 'SimpleQuantity', 'Age', 'Count', 'Distance', 'Duration', 'MoneyQuantity']);

/**
 * A number parameter reads a decimal or integer, or a Range (its low and high
 * values). SampledData and Ratio have no single number: they never match.
 */
function numberCondition(prefix: Prefix, decimal: Decimal, types: Types): string {
  return anyOf(
    forTypes(types, [
      [isPrimitive, `(@.type() == "number" && ${pointCondition('@', prefix, decimal)})`],
      [(type) => type === 'Range', rangeCondition('@."low"."value"', '@."high"."value"', prefix, decimal)],
    ]),
  );
}

/**
 * A quantity parameter reads a Quantity (and its profiles Age, Duration, ...),
 * a Money (its currency is the code, of system urn:iso:std:iso:4217) or a
 * Range, whose present bounds must both have the unit asked for.
 */
function quantityCondition(value: Extract<SearchValue, { kind: 'quantity' }>, types: Types): string {
  const units = (item: string) => [
    ...(value.system === undefined ? [] : [`${item}."system" == ${literal(value.system)}`]),
    ...(value.code === undefined ? [] : [`(${item}."code" == ${literal(value.code)} || ${item}."unit" == ${literal(value.code)})`]),
  ];
  const currency =
    value.system !== undefined && value.system !== currencySystem ? [never] : value.code === undefined ? [] : [`@."currency" == ${literal(value.code)}`];
  const boundUnits = (bound: string) => allOf(units(bound));
  const rangeUnits = `(!exists(@."low") || ${boundUnits('@."low"')}) && (!exists(@."high") || ${boundUnits('@."high"')})`;
  return anyOf(
    forTypes(types, [
      [(type) => quantityTypes.has(type), allOf([pointCondition('@."value"', value.prefix, value), ...units('@')])],
      [(type) => type === 'Money', allOf([pointCondition('@."value"', value.prefix, value), ...currency])],
      [(type) => type === 'Range', `(${rangeCondition('@."low"."value"', '@."high"."value"', value.prefix, value)} && ${rangeUnits})`],
    ]),
  );
}

const currencySystem = 'urn:iso:std:iso:4217';

/**
 * A stored number is exact. The search value's range (its implicit precision,
 * or ±10% for ap) applies to eq, ne and ap; the other prefixes compare with
 * the value itself.
 */
function pointCondition(item: string, prefix: Prefix, { value, low, high }: Decimal): string {
  switch (prefix) {
    case 'eq':
      return `(${item} >= ${low} && ${item} < ${high})`;
    case 'ne':
      return `(${item} < ${low} || ${item} >= ${high})`;
    case 'ap':
      return `(${item} >= ${low} && ${item} <= ${high})`;
    case 'gt':
    case 'sa':
      return `(${item} > ${value})`;
    case 'lt':
    case 'eb':
      return `(${item} < ${value})`;
    case 'ge':
      return `(${item} >= ${value})`;
    case 'le':
      return `(${item} <= ${value})`;
  }
}

/**
 * A Range [L, H], open where a bound has no value, compared as R4 compares
 * ranges, with the choices of pointCondition (a number is the range [v, v]):
 * eq when the search range contains it, gt when some of it is above the
 * value, sa when all of it is, ap when it overlaps ±10%. A Range with neither
 * bound is no value.
 */
function rangeCondition(low: string, high: string, prefix: Prefix, decimal: Decimal): string {
  const open = (bound: string) => `!exists(${bound})`;
  const condition = (() => {
    switch (prefix) {
      case 'eq':
        return `(${low} >= ${decimal.low} && ${high} < ${decimal.high})`;
      case 'ne':
        return `(${open(low)} || ${open(high)} || ${low} < ${decimal.low} || ${high} >= ${decimal.high})`;
      case 'ap':
        return `((${open(low)} || ${low} <= ${decimal.high}) && (${open(high)} || ${high} >= ${decimal.low}))`;
      case 'gt':
        return `(${open(high)} || ${high} > ${decimal.value})`;
      case 'ge':
        return `(${open(high)} || ${high} >= ${decimal.value})`;
      case 'lt':
        return `(${open(low)} || ${low} < ${decimal.value})`;
      case 'le':
        return `(${open(low)} || ${low} <= ${decimal.value})`;
      case 'sa':
        return `${low} > ${decimal.value}`;
      case 'eb':
        return `${high} < ${decimal.value}`;
    }
  })();
  return `((exists(${low}) || exists(${high})) && ${condition})`;
}

// --- date ------------------------------------------------------------------

/**
 * A stored value covers a range [L, H): a date of precision year, month or day
 * its whole period (taken in UTC); a dateTime or instant to the second that
 * second; one with a fraction its microsecond; a Period from its start's L to
 * its end's H (open where absent); a Timing each of its events. The prefixes
 * compare that range with the search range [low, high) as FHIR defines them.
 */
type Bound = { lowAtLeast: (x: string) => string; lowBelow: (x: string) => string; highAbove: (x: string) => string; highAtMost: (x: string) => string };

function prefixCondition(prefix: Prefix, low: string, high: string, bound: Bound): string {
  const contained = `(${bound.lowAtLeast(low)} && ${bound.highAtMost(high)})`;
  switch (prefix) {
    case 'eq':
      return contained;
    case 'ne':
      return `(${bound.lowBelow(low)} || ${bound.highAbove(high)})`;
    case 'gt':
      return bound.highAbove(high);
    case 'lt':
      return bound.lowBelow(low);
    case 'ge':
      return `(${bound.highAbove(high)} || ${contained})`;
    case 'le':
      return `(${bound.lowBelow(low)} || ${contained})`;
    case 'sa':
      return bound.lowAtLeast(high);
    case 'eb':
      return bound.highAtMost(low);
    case 'ap':
      // The search range is already widened (values.ts): overlapping it is approximately equal.
      return `(${bound.lowBelow(high)} && ${bound.highAbove(low)})`;
  }
}

function dateCondition(prefix: Prefix, low: string, high: string, types: Types): string {
  const onStrings = (forms: readonly DateForm[]) =>
    anyOf(forms.map((form) => `(${form.guard('@')} && ${prefixCondition(prefix, low, high, form.bound('@'))})`));
  const onPeriod = `(@.type() == "object" && !exists(@."event") && ${prefixCondition(prefix, low, high, periodBound())})`;
  const onTiming = `exists(@."event" ? (${onStrings(dateForms)}))`;
  return anyOf(
    forTypes(types, [
      [(type) => type === 'date', `(@.type() == "string" && ${onStrings(partialDateForms)})`],
      [(type) => type === 'instant', `(@.type() == "string" && ${onStrings(timeForms)})`],
      [(type) => type === 'dateTime', `(@.type() == "string" && ${onStrings(dateForms)})`],
      [(type) => type === 'Period', onPeriod],
      [(type) => type === 'Timing', onTiming],
    ]),
  );
}

function periodBound(): Bound {
  const start = '@."start"';
  const end = '@."end"';
  const some = (item: string, condition: (bound: Bound) => string) => anyOf(dateForms.map((form) => `(${form.guard(item)} && ${condition(form.bound(item))})`));
  return {
    lowAtLeast: (x) => some(start, (bound) => bound.lowAtLeast(x)),
    lowBelow: (x) => `(!exists(${start}) || ${some(start, (bound) => bound.lowBelow(x))})`,
    highAbove: (x) => `(!exists(${end}) || ${some(end, (bound) => bound.highAbove(x))})`,
    highAtMost: (x) => some(end, (bound) => bound.highAtMost(x)),
  };
}

type DateForm = { guard: (item: string) => string; bound: (item: string) => Bound };

const time = '\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}';
const utcSeconds = literal('YYYY-MM-DD"T"HH24:MI:SS"Z"');
const utcMicros = literal('YYYY-MM-DD"T"HH24:MI:SS.US"Z"');

/**
 * The shapes a stored date can have, each with a guard and its bounds. A
 * partial date compares as text against the search bound cut to its
 * precision; a time is parsed with .datetime(): a "Z" time as a timestamp and
 * the bound too, an offset time as a timestamptz and the bound too, so no
 * comparison needs a session time zone.
 */
const partialDateForms: readonly DateForm[] = [4, 7, 10].map((length) => partialDateForm(length));

const timeForms: readonly DateForm[] = [
  timeForm(`^${time}Z$`, (item) => `${item}.datetime(${utcSeconds})`, 'second', 'utc'),
  timeForm(`^${time}\\.\\d{1,6}Z$`, (item) => `${item}.datetime(${utcMicros})`, 'microsecond', 'utc'),
  timeForm(`^${time}[+-]\\d{2}:\\d{2}$`, (item) => `${item}.datetime()`, 'second', 'offset'),
  timeForm(`^${time}\\.\\d{1,6}[+-]\\d{2}:\\d{2}$`, (item) => `${item}.datetime()`, 'microsecond', 'offset'),
];

const dateForms: readonly DateForm[] = [...partialDateForms, ...timeForms];

/** YYYY (4), YYYY-MM (7), YYYY-MM-DD (10): [start of the period, start of the next). */
function partialDateForm(length: number): DateForm {
  const pattern = ['^\\d{4}$', '^\\d{4}-\\d{2}$', '^\\d{4}-\\d{2}-\\d{2}$'][[4, 7, 10].indexOf(length)]!;
  return {
    guard: (item) => `${item} like_regex ${literal(pattern)}`,
    bound: (item) => ({
      // start(d) >= x  ⟺  d >= x rounded up to the precision
      lowAtLeast: (x) => `${item} >= ${literal(ceilTo(x, length))}`,
      lowBelow: (x) => `${item} < ${literal(ceilTo(x, length))}`,
      // end(d) > x  ⟺  d >= x cut to the precision
      highAbove: (x) => `${item} >= ${literal(x.slice(0, length))}`,
      highAtMost: (x) => `${item} < ${literal(x.slice(0, length))}`,
    }),
  };
}

function timeForm(pattern: string, parse: (item: string) => string, precision: 'second' | 'microsecond', zone: 'utc' | 'offset'): DateForm {
  const constant = (x: string) => (zone === 'utc' ? `${literal(x)}.datetime(${utcMicros})` : `${literal(`${x.slice(0, -1)}+00:00`)}.datetime()`);
  // A time to the second covers [t, t+1s): its end is above x iff t >= x cut to the second.
  const cut = (x: string) => (precision === 'second' ? `${x.slice(0, 19)}.000000Z` : x);
  return {
    guard: (item) => `${item} like_regex ${literal(pattern)}`,
    bound: (item) => ({
      lowAtLeast: (x) => `${parse(item)} >= ${constant(x)}`,
      lowBelow: (x) => `${parse(item)} < ${constant(x)}`,
      highAbove: (x) => `${parse(item)} >= ${constant(cut(x))}`,
      highAtMost: (x) => `${parse(item)} < ${constant(cut(x))}`,
    }),
  };
}

/** The first period of `length` characters' precision that starts at or after instant x. */
function ceilTo(x: string, length: number): string {
  const cut = x.slice(0, length);
  const start = `${cut}${'0001-01-01T00:00:00.000000Z'.slice(length)}`;
  if (start === x) return cut;
  const year = Number(x.slice(0, 4));
  const month = Number(x.slice(5, 7));
  const day = Number(x.slice(8, 10));
  const next = length === 4 ? Date.UTC(year + 1, 0, 1) : length === 7 ? Date.UTC(year, month, 1) : Date.UTC(year, month - 1, day + 1);
  return formatMicros(BigInt(next) * 1000n).slice(0, length);
}

// --- text helpers ----------------------------------------------------------

/** jsonpath has no true and false predicates, only comparisons. */
const always = '(true == true)';
const never = '(true == false)';

/** A jsonpath string literal (JSON's escapes are jsonpath's). */
function literal(text: string): string {
  return JSON.stringify(text);
}

function key(name: string): string {
  return JSON.stringify(name);
}

/**
 * `(a || b || …)`, nested in halves past a few terms: PostgreSQL evaluates a
 * flat chain recursively, one level per term, and a thousand references
 * would exhaust its stack.
 */
function anyOf(conditions: string[]): string {
  return joined(conditions, ' || ');
}

function allOf(conditions: string[]): string {
  if (conditions.length === 0) return always;
  return joined(conditions, ' && ');
}

function joined(conditions: string[], operator: string): string {
  if (conditions.length === 1) return conditions[0]!;
  if (conditions.length <= 8) return `(${conditions.join(operator)})`;
  const half = Math.ceil(conditions.length / 2);
  return `(${joined(conditions.slice(0, half), operator)}${operator}${joined(conditions.slice(half), operator)})`;
}

/** Resources whose `paths` hold a Reference to one of `references` (`Type/id`): the _revinclude lookup, by equality so GIN serves it. */
export function referencesAnyOf(paths: readonly ElementPath[], references: readonly string[]): string {
  const condition = anyOf(references.map((reference) => `@."reference" == ${literal(reference)}`));
  return anyOf(paths.map((path) => `exists(${accessor(path)} ? (${condition}))`));
}
