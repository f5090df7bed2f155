import { booleanType, childType, describe, integerType, typeNamed, type ItemType } from './model.ts';
import { FhirPathRefused, parseFhirPath, quantitiesRefused, type Expression } from './parse.ts';
import { postgresRegex } from './regex.ts';

/**
 * A FHIRPath criteria (a topic's fhirPathCriteria) compiled to one SQL
 * expression over two jsonb values, `previous` and `current`: the version
 * before the write and the version written, NULL where there is none (a
 * create's previous, a delete's current). It is true exactly where
 * FHIRPath's result is a single `true`; an empty or false result, and an
 * evaluation error, are false. Never approximate: what the compiler cannot
 * translate exactly, it refuses (FhirPathRefused, naming the construct and
 * where it is).
 *
 * The R4 model (./model.ts) types each sub-expression, and says whether it
 * holds one value at most; each is compiled in one of three forms:
 *   - an item: a jsonb value, or SQL NULL for the empty collection, where the
 *     model says there is at most one (`%current.status`: `current -> 'status'`);
 *   - a Boolean: an SQL boolean, NULL for empty. SQL's AND, OR and NOT are
 *     FHIRPath's three-valued logic, so `%current.status = 'finished' and
 *     %previous.status != 'finished'` is plain SQL a DBA reads;
 *   - a collection: a jsonb array of items as they are in the resource's
 *     JSON, or SQL NULL for an evaluation error (a function that takes one
 *     item given several), which the functions of db/functions/fhirpath.*.sql
 *     pass on. An item or a Boolean becomes a collection where an operand
 *     needs one.
 * Items and Booleans cannot be errors: only a collection holds several items.
 */
export function compileFhirPathCriteria(expression: string, resourceType: string): string {
  const tree = parseFhirPath(expression);
  const result = compile(tree, { resourceType, context: version('current', resourceType), depth: 0 });
  requireBoolean(result, tree, 'the expression');
  switch (result.form) {
    case 'boolean':
      return `coalesce(${result.sql}, false)`;
    case 'item':
      return `coalesce(fhirpath.as_boolean(${result.sql}), false)`;
    case 'collection':
      return `coalesce(${result.sql} = '[true]'::jsonb, false)`;
  }
}

type Form = 'item' | 'boolean' | 'collection';

type Compiled = {
  sql: string;
  type: ItemType;
  form: Form;
  /** A choice element not yet narrowed: what it was read from and its name, for ofType(). */
  choice?: { input: Compiled; name: string; repeats: boolean };
};

/** What `$this` and a bare name refer to: the resource at the top, each item inside where(), all() and exists(). */
type Scope = { resourceType: string; context: Compiled; depth: number };

function compile(expression: Expression, scope: Scope): Compiled {
  switch (expression.kind) {
    case 'literal':
      return literal(expression);
    case 'variable':
      if (expression.name === 'current' || expression.name === 'previous') return version(expression.name, scope.resourceType);
      throw new FhirPathRefused(`%${expression.name}`, expression.at, 'only %current and %previous are defined in a topic criteria');
    case 'this':
      return scope.context;
    case 'member':
      return member(expression, scope);
    case 'call':
      return call(expression, scope);
    case 'operator':
      return operator(expression, scope);
    case 'type-operator':
      return typeTest(expression.operator, compile(expression.input, scope), expression.typeName, `the operator ${expression.operator}`, expression);
  }
}

function version(name: 'current' | 'previous', resourceType: string): Compiled {
  return { sql: name, type: { kind: 'element', path: resourceType }, form: 'item' };
}

/** A SQL string literal of any text (standard_conforming_strings, PostgreSQL's default since 9.1: a backslash is itself). */
function sqlText(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

function jsonb(value: unknown): string {
  return `${sqlText(JSON.stringify(value))}::jsonb`;
}

function literal(expression: Expression & { kind: 'literal' }): Compiled {
  switch (expression.type) {
    case 'Empty':
      return { sql: 'NULL::jsonb', type: { kind: 'nothing' }, form: 'item' };
    case 'Boolean':
      return { sql: String(expression.value), type: booleanType, form: 'boolean' };
    case 'String':
      return { sql: jsonb(expression.value), type: { kind: 'primitive', name: 'String', fhirType: 'string' }, form: 'item' };
    case 'Integer':
      return { sql: `'${String(expression.value)}'::jsonb`, type: integerType, form: 'item' };
    case 'Decimal':
      return { sql: `'${String(expression.value)}'::jsonb`, type: { kind: 'primitive', name: 'Decimal', fhirType: 'decimal' }, form: 'item' };
    case 'Date':
    case 'DateTime':
    case 'Time': {
      const text = String(expression.value);
      if (!isCalendarDay(text))
        throw new FhirPathRefused(`the ${expression.type.toLowerCase()} @${expression.type === 'Time' ? 'T' : ''}${text}`, expression.at, 'no such day');
      return { sql: jsonb(text), type: { kind: 'primitive', name: expression.type, fhirType: fhirTypeOf[expression.type] }, form: 'item' };
    }
  }
}

const fhirTypeOf = { Date: 'date', DateTime: 'dateTime', Time: 'time' } as const;

/** Whether a date literal's day exists (not 2024-02-30, nor in the year 0, as PostgreSQL has none); a time has no day. */
function isCalendarDay(text: string): boolean {
  const date = /^(\d{4})(?:-(\d\d)(?:-(\d\d))?)?/.exec(text);
  if (date === null) return true;
  const [year, month, day] = [Number(date[1]), Number(date[2] ?? 1), Number(date[3] ?? 1)];
  const daysInMonth = new Date(Date.UTC(2000, month, 0)).getUTCDate() - (month === 2 && !isLeapYear(year) ? 1 : 0);
  return year > 0 && day <= daysInMonth;
}

const isLeapYear = (year: number) => year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);

/** Whether items of the type are Dates, DateTimes or Times: compared by fhirpath.date_time_order (precisions, offsets). */
function isTemporal(type: ItemType): boolean {
  return type.kind === 'primitive' && temporal.has(type.name);
}
const temporal = new Set(['Date', 'DateTime', 'Time']);

/** Any form as a collection. */
function collection(compiled: Compiled): string {
  switch (compiled.form) {
    case 'collection':
      return compiled.sql;
    case 'item':
      return `fhirpath.collection(${compiled.sql})`;
    case 'boolean':
      return `fhirpath.collection(to_jsonb(${compiled.sql}))`;
  }
}

/** An item or a Boolean as an item (a jsonb value, NULL when empty). */
function item(compiled: Compiled): string {
  return compiled.form === 'boolean' ? `to_jsonb(${compiled.sql})` : compiled.sql;
}

/** An item or a Boolean, of type Boolean, as an SQL boolean (NULL when empty). */
function truth(compiled: Compiled): string {
  return compiled.form === 'item' ? `fhirpath.as_boolean(${compiled.sql})` : compiled.sql;
}

const single = (compiled: Compiled) => compiled.form !== 'collection';

/** The items of `input` (or the scope's) named `name`, flattened: FHIRPath's path navigation. */
function member(expression: Expression & { kind: 'member' }, scope: Scope): Compiled {
  const input = expression.input === null ? scope.context : compile(expression.input, scope);
  // A path may start with the resource's type (`Encounter.status`): the resource itself.
  if (expression.input === null && /^[A-Z]/.test(expression.name) && scope.depth === 0) {
    if (expression.name === scope.resourceType) return input;
    throw new FhirPathRefused(expression.name, expression.at, `the trigger is on ${scope.resourceType}: a path from ${expression.name} is always empty`);
  }
  if (input.type.kind !== 'element') {
    throw new FhirPathRefused(
      `.${expression.name}`,
      expression.at,
      `${describe(input.type)} has no elements${input.type.kind === 'choice' ? ': narrow it with ofType() first' : ''}`,
    );
  }
  const child = childType(input.type, expression.name);
  if (child === undefined) throw new FhirPathRefused(`.${expression.name}`, expression.at, `R4 ${input.type.path} has no element '${expression.name}'`);
  if ('unsupported' in child) throw new FhirPathRefused(`.${expression.name}`, expression.at, child.unsupported);
  const { type, repeats } = child;
  if (type.kind === 'choice') {
    const keys = type.types.map((name) => `@.key == "${expression.name}${capitalised(name)}"`).join(' || ');
    return {
      sql: `jsonb_path_query_array(${collection(input)}, ${sqlText(`$[*].keyvalue() ? (${keys}).value[*] ? (@ != null)`)})`,
      type,
      form: 'collection',
      choice: { input, name: expression.name, repeats },
    };
  }
  return navigate(input, expression.name, type, repeats);
}

/** An element by its JSON name: an item from an item where it does not repeat, else a collection. */
function navigate(input: Compiled, jsonName: string, type: ItemType, repeats: boolean): Compiled {
  if (input.form === 'item' && !repeats) return { sql: `nullif(${input.sql} -> ${sqlText(jsonName)}, 'null')`, type, form: 'item' };
  return { sql: `jsonb_path_query_array(${collection(input)}, ${sqlText(`$[*]."${jsonName}"[*] ? (@ != null)`)})`, type, form: 'collection' };
}

function capitalised(name: string): string {
  return name.charAt(0).toUpperCase() + name.slice(1);
}

function call(expression: Expression & { kind: 'call' }, scope: Scope): Compiled {
  const { name, args, at } = expression;
  const input = () => (expression.input === null ? scope.context : compile(expression.input, scope));
  const arity = (count: number, optional = 0) => {
    if (args.length < count || args.length > count + optional) {
      throw new FhirPathRefused(
        `${name}()`,
        at,
        `takes ${optional === 0 ? count : `${count} to ${count + optional}`} argument${count + optional === 1 ? '' : 's'}`,
      );
    }
  };
  switch (name) {
    case 'exists':
    case 'empty': {
      arity(0, name === 'exists' ? 1 : 0);
      const tested = args.length === 0 ? input() : where(input(), args[0]!, scope);
      if (single(tested)) return { sql: `(${tested.sql} IS ${name === 'exists' ? 'NOT ' : ''}NULL)`, type: booleanType, form: 'boolean' };
      return { sql: `fhirpath.${name}(${tested.sql})`, type: booleanType, form: 'collection' };
    }
    case 'count':
      arity(0);
      return { sql: `fhirpath.count(${collection(input())})`, type: integerType, form: 'collection' };
    case 'first':
    case 'last': {
      arity(0);
      const items = input();
      return single(items) ? items : { sql: `fhirpath.${name}(${items.sql})`, type: items.type, form: 'collection' };
    }
    case 'not': {
      arity(0);
      const operand = input();
      requireBoolean(operand, expression, 'not()');
      if (single(operand)) return { sql: `(NOT ${truth(operand)})`, type: booleanType, form: 'boolean' };
      return { sql: `fhirpath.logical_not(${operand.sql})`, type: booleanType, form: 'collection' };
    }
    case 'where':
      arity(1);
      return where(input(), args[0]!, scope);
    case 'all':
      arity(1);
      return all(input(), args[0]!, scope);
    case 'iif': {
      arity(2, 1);
      if (expression.input !== null) throw new FhirPathRefused('iif()', at, 'supported only at the start of an expression, not after a path');
      const criterion = compile(args[0]!, scope);
      requireBoolean(criterion, args[0]!, "iif()'s criterion");
      const ifTrue = compile(args[1]!, scope);
      const otherwise: Compiled = args[2] === undefined ? { sql: 'NULL::jsonb', type: { kind: 'nothing' }, form: 'item' } : compile(args[2], scope);
      return {
        sql: `fhirpath.iif(${collection(criterion)}, ${collection(ifTrue)}, ${collection(otherwise)})`,
        type: common(ifTrue, otherwise, expression),
        form: 'collection',
      };
    }
    case 'startsWith':
    case 'endsWith':
    case 'contains': {
      arity(1);
      const text = input();
      const argument = compile(args[0]!, scope);
      requireString(text, expression, `${name}()'s input`);
      requireString(argument, args[0]!, `${name}()'s argument`);
      if (single(text) && single(argument)) {
        const [a, b] = [`(${item(text)} #>> '{}')`, `(${item(argument)} #>> '{}')`];
        const test =
          name === 'startsWith' ? `starts_with(${a}, ${b})` : name === 'endsWith' ? `(right(${a}, length(${b})) = ${b})` : `(strpos(${a}, ${b}) > 0)`;
        return { sql: test, type: booleanType, form: 'boolean' };
      }
      return { sql: `fhirpath.string_test(${collection(text)}, ${collection(argument)}, '${name}')`, type: booleanType, form: 'collection' };
    }
    case 'matches': {
      arity(1);
      const pattern = args[0]!;
      if (pattern.kind !== 'literal' || pattern.type !== 'String') throw new FhirPathRefused('matches()', at, 'takes its pattern as a string literal');
      const text = input();
      requireString(text, expression, "matches()'s input");
      const regex = postgresRegex(String(pattern.value), pattern.at);
      if (single(text)) return { sql: `((${item(text)} #>> '{}') ~ ${sqlText(regex)})`, type: booleanType, form: 'boolean' };
      return { sql: `fhirpath.string_test(${text.sql}, ${jsonb([regex])}, 'matches')`, type: booleanType, form: 'collection' };
    }
    case 'upper':
    case 'lower':
    case 'length': {
      arity(0);
      const text = input();
      requireString(text, expression, `${name}()'s input`);
      const type = name === 'length' ? integerType : text.type;
      if (!single(text)) return { sql: `fhirpath.string_function(${text.sql}, '${name}')`, type, form: 'collection' };
      const value = `(${item(text)} #>> '{}')`;
      const mapped = name === 'length' ? `fhirpath.length_in_utf16(${value})` : `${name}(${value} COLLATE "und-x-icu")`;
      return { sql: `to_jsonb(${mapped})`, type, form: 'item' };
    }
    case 'extension': {
      arity(1);
      const url = args[0]!;
      if (url.kind !== 'literal' || url.type !== 'String') throw new FhirPathRefused('extension()', at, 'takes the extension URL as a string literal');
      const owner = input();
      if (owner.type.kind !== 'element') throw new FhirPathRefused('extension()', at, `${describe(owner.type)} has no extensions the compiler reads`);
      return {
        sql: `jsonb_path_query_array(${collection(owner)}, '$[*].extension[*] ? (@.url == $url)', ${jsonb({ url: url.value })})`,
        type: { kind: 'element', path: 'Extension' },
        form: 'collection',
      };
    }
    case 'ofType':
      arity(1);
      return narrowed(input(), qualified(args[0]!), 'ofType()', expression);
    case 'is':
    case 'as':
      arity(1);
      return typeTest(name, input(), qualified(args[0]!), `${name}()`, expression);
    case 'today':
    case 'now': {
      // The write's transaction time, the same for every row of a statement and every topic; its day and time in UTC,
      // the zone a date or a time without an offset is read in (db/functions/fhirpath.date_time.sql).
      arity(0);
      if (expression.input !== null) throw new FhirPathRefused(`${name}()`, at, 'supported only on its own, not after a path');
      return name === 'today'
        ? {
            sql: `to_jsonb(to_char(transaction_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD'))`,
            type: { kind: 'primitive', name: 'Date', fhirType: 'date' },
            form: 'item',
          }
        : {
            sql: `to_jsonb(to_char(transaction_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))`,
            type: { kind: 'primitive', name: 'DateTime', fhirType: 'dateTime' },
            form: 'item',
          };
    }
    default:
      throw new FhirPathRefused(`${name}()`, at, 'not supported');
  }
}

/** The items of `input` for which `criteria` (with `$this` each item) is true; an error for any item is the result's. */
function where(input: Compiled, criteria: Expression, scope: Scope): Compiled {
  const { from, failed, depth } = perItem(input, criteria, scope);
  return {
    sql: `(SELECT CASE WHEN ${failed} THEN NULL
       ELSE coalesce(jsonb_agg(tested${depth}.item ORDER BY tested${depth}.place) FILTER (WHERE tested${depth}.keep = '[true]'), '[]') END
     ${from})`,
    type: input.type,
    form: 'collection',
  };
}

/** Whether `criteria` is true for every item of `input` (true when there is none). */
function all(input: Compiled, criteria: Expression, scope: Scope): Compiled {
  const { from, failed, depth } = perItem(input, criteria, scope);
  return {
    sql: `(SELECT CASE WHEN ${failed} THEN NULL
       ELSE jsonb_build_array(coalesce(bool_and(tested${depth}.keep = '[true]'), true)) END
     ${from})`,
    type: booleanType,
    form: 'collection',
  };
}

/**
 * The FROM of where() and all(): each item of `input` with its place and the
 * criteria's result for it; and `failed`, the aggregate that says the input or
 * the criteria for an item was an error, or the criteria gave more than one item.
 */
function perItem(input: Compiled, criteria: Expression, scope: Scope) {
  const depth = scope.depth + 1;
  const each: Compiled = { sql: `items${depth}.item`, type: input.type, form: 'item' };
  const test = compile(criteria, { resourceType: scope.resourceType, context: each, depth });
  requireBoolean(test, criteria, 'the criteria');
  const from = `FROM (SELECT ${collection(input)} AS input) source${depth}
     LEFT JOIN LATERAL (SELECT items${depth}.item, items${depth}.place, ${collection(test)} AS keep
                        FROM jsonb_array_elements(source${depth}.input) WITH ORDINALITY AS items${depth}(item, place)) tested${depth} ON true`;
  const failed = `bool_or(source${depth}.input IS NULL) OR bool_or(tested${depth}.place IS NOT NULL AND (tested${depth}.keep IS NULL OR jsonb_array_length(tested${depth}.keep) > 1))`;
  return { from, failed, depth };
}

/** The items of a choice element of one of its types (ofType()), as the element's JSON name for that type reads them. */
function narrowed(input: Compiled, typeName: string | undefined, construct: string, call: Expression): Compiled {
  const name = typeName?.replace(/^FHIR\./, '');
  if (name === undefined) throw new FhirPathRefused(construct, call.at, 'takes a type name');
  if (input.choice === undefined || input.type.kind !== 'choice') {
    throw new FhirPathRefused(construct, call.at, 'applies to a choice element (value[x] and the like) here; nothing else');
  }
  // ofType(Quantity), the operator is Quantity
  const withType = construct.endsWith('()') ? `${construct.slice(0, -2)}(${typeName})` : `${construct} ${typeName}`;
  if (!input.type.types.includes(name)) {
    throw new FhirPathRefused(withType, call.at, `${describe(input.type)} is never a ${name}: its types are ${input.type.types.join(', ')}`);
  }
  const type = typeNamed(name, input.type.path);
  if ('unsupported' in type) throw new FhirPathRefused(withType, call.at, type.unsupported);
  return navigate(input.choice.input, `${input.choice.name}${capitalised(name)}`, type, input.choice.repeats);
}

/**
 * `is` and `as` (operators or functions) on a choice element: its one item's
 * type, or the item if of the type. On anything else they would need the R4
 * type hierarchy (a code is a string, an Age a Quantity), which the compiler
 * does not follow: refused.
 */
function typeTest(operator: 'is' | 'as', input: Compiled, typeName: string | undefined, construct: string, expression: Expression): Compiled {
  const typed = narrowed(input, typeName, construct, expression);
  const choiceItems = collection(input);
  if (operator === 'is') return { sql: `fhirpath.is_type(${choiceItems}, ${collection(typed)})`, type: booleanType, form: 'collection' };
  return { sql: `fhirpath.as_type(${choiceItems}, ${collection(typed)})`, type: typed.type, form: 'collection' };
}

/** `Quantity` or `FHIR.Quantity` as a member path. */
function qualified(expression: Expression): string | undefined {
  if (expression.kind !== 'member') return undefined;
  if (expression.input === null) return expression.name;
  const head = qualified(expression.input);
  return head === undefined ? undefined : `${head}.${expression.name}`;
}

/** Each logical operator as SQL's on two Booleans (its three-valued logic is FHIRPath's), and as the function on collections. */
const logical: Record<string, { sql: (a: string, b: string) => string; function: string }> = {
  and: { sql: (a, b) => `(${a} AND ${b})`, function: 'logical_and' },
  or: { sql: (a, b) => `(${a} OR ${b})`, function: 'logical_or' },
  xor: { sql: (a, b) => `(${a} <> ${b})`, function: 'logical_xor' },
  implies: { sql: (a, b) => `(NOT ${a} OR ${b})`, function: 'logical_implies' },
};

function operator(expression: Expression & { kind: 'operator' }, scope: Scope): Compiled {
  const left = compile(expression.left, scope);
  const right = compile(expression.right, scope);
  const { operator: symbol } = expression;
  const logic = logical[symbol];
  if (logic !== undefined) {
    requireBoolean(left, expression.left, `${symbol}'s left operand`);
    requireBoolean(right, expression.right, `${symbol}'s right operand`);
    if (single(left) && single(right)) return { sql: logic.sql(truth(left), truth(right)), type: booleanType, form: 'boolean' };
    return { sql: `fhirpath.${logic.function}(${collection(left)}, ${collection(right)})`, type: booleanType, form: 'collection' };
  }
  switch (symbol) {
    case '=':
    case '!=': {
      if (isTemporal(common(left, right, expression))) {
        if (single(left) && single(right))
          return { sql: `(${dateTimeOrder(left, right)} ${symbol === '=' ? '=' : '<>'} 0)`, type: booleanType, form: 'boolean' };
        const equal = `fhirpath.date_times_equal(${collection(left)}, ${collection(right)})`;
        return { sql: symbol === '=' ? equal : `fhirpath.logical_not(${equal})`, type: booleanType, form: 'collection' };
      }
      if (single(left) && single(right)) {
        const equal = `${item(left)} = ${item(right)}`;
        return { sql: symbol === '=' ? `(${equal})` : `(NOT (${equal}))`, type: booleanType, form: 'boolean' };
      }
      const equal = `fhirpath.equal(${collection(left)}, ${collection(right)})`;
      return { sql: symbol === '=' ? equal : `fhirpath.logical_not(${equal})`, type: booleanType, form: 'collection' };
    }
    case 'in':
    case 'contains': {
      refuseTemporal(common(left, right, expression), symbol, expression);
      const [element, items] = symbol === 'in' ? [left, right] : [right, left];
      return { sql: `fhirpath.member_of(${collection(element)}, ${collection(items)})`, type: booleanType, form: 'collection' };
    }
    case '|': {
      const type = common(left, right, expression);
      refuseTemporal(type, symbol, expression);
      return { sql: `fhirpath.union(${collection(left)}, ${collection(right)})`, type, form: 'collection' };
    }
    case '<':
    case '<=':
    case '>':
    case '>=': {
      const type = common(left, right, expression);
      if (isTemporal(type)) {
        if (single(left) && single(right)) return { sql: `(${dateTimeOrder(left, right)} ${symbol} 0)`, type: booleanType, form: 'boolean' };
        return { sql: `fhirpath.date_times_compare(${collection(left)}, ${collection(right)}, '${symbol}')`, type: booleanType, form: 'collection' };
      }
      const numbers = type.kind === 'primitive' && (type.name === 'Integer' || type.name === 'Decimal');
      if (!numbers && type.kind !== 'nothing' && !(type.kind === 'primitive' && type.name === 'String')) {
        throw new FhirPathRefused(`the operator ${symbol}`, expression.at, `compares strings, numbers, dates and times here, not ${describe(type)}`);
      }
      if (single(left) && single(right)) {
        const [a, b] = numbers
          ? [`fhirpath.as_number(${item(left)})`, `fhirpath.as_number(${item(right)})`]
          : [`(${item(left)} #>> '{}') COLLATE "C"`, `(${item(right)} #>> '{}') COLLATE "C"`];
        return { sql: `(${a} ${symbol} ${b})`, type: booleanType, form: 'boolean' };
      }
      return { sql: `fhirpath.compare(${collection(left)}, ${collection(right)}, '${symbol}')`, type: booleanType, form: 'collection' };
    }
    case '~':
    case '!~': {
      const equivalent = equivalence(left, right, expression);
      return { sql: symbol === '~' ? equivalent : `(NOT ${equivalent})`, type: booleanType, form: 'boolean' };
    }
    default:
      throw new FhirPathRefused(`the operator ${symbol}`, expression.at, 'not supported');
  }
}

/**
 * FHIRPath's `~` of two operands of one item at most: true when both are
 * empty, false when one is, else strings upper-cased with their whitespace
 * spaces (fhirpath.equivalence_text), Booleans and integers equal, dates and
 * times of one type at one precision and instant. Never empty. Refused:
 * collections (FHIRPath compares them irrespective of order, fhirpath.js in
 * order), decimals (fhirpath.js rounds them to the lesser precision in
 * floating point), elements (child by child, as ~), and a date with a
 * dateTime (fhirpath.js answers differently by the order of the operands).
 */
function equivalence(left: Compiled, right: Compiled, expression: Expression & { kind: 'operator' }): string {
  const construct = `the operator ${expression.operator}`;
  if (!single(left) || !single(right)) {
    throw new FhirPathRefused(construct, expression.at, 'compares one item with one here; collections are not supported yet');
  }
  const type = common(left, right, expression);
  const [a, b] = [item(left), item(right)];
  const test = () => {
    if (type.kind !== 'primitive') {
      if (type.kind === 'nothing') return 'true';
      throw new FhirPathRefused(construct, expression.at, `compares strings, Booleans, integers, dates and times here, not ${describe(type)}`);
    }
    switch (type.name) {
      case 'String':
        return `fhirpath.equivalence_text(${a} #>> '{}') = fhirpath.equivalence_text(${b} #>> '{}')`;
      case 'Boolean':
      case 'Integer':
        if (left.type.kind === 'primitive' && right.type.kind === 'primitive' && left.type.name !== right.type.name) break;
        return `${a} = ${b}`;
      case 'Date':
      case 'DateTime':
      case 'Time': {
        const sides = [left.type, right.type].filter((side) => side.kind === 'primitive');
        if (new Set(sides.map((side) => side.name)).size > 1 || new Set(sides.map((side) => side.fhirType === 'instant')).size > 1) break;
        return `fhirpath.date_times_equivalent(${a} #>> '{}', ${b} #>> '{}')`;
      }
    }
    throw new FhirPathRefused(construct, expression.at, `not supported for ${describe(left.type)} and ${describe(right.type)}`);
  };
  return `(CASE WHEN ${a} IS NULL THEN ${b} IS NULL WHEN ${b} IS NULL THEN false ELSE ${test()} END)`;
}

/** The order of two single Dates, DateTimes or Times (-1, 0, 1; NULL where FHIRPath cannot say, or either is empty). */
function dateTimeOrder(left: Compiled, right: Compiled): string {
  return `fhirpath.date_time_order(${item(left)} #>> '{}', ${item(right)} #>> '{}')`;
}

function refuseTemporal(type: ItemType, symbol: string, expression: Expression): void {
  if (isTemporal(type)) {
    throw new FhirPathRefused(`the operator ${symbol}`, expression.at, `not supported yet for ${describe(type)}s; =, !=, <, <=, > and >= are`);
  }
}

const numeric = new Set(['Integer', 'Decimal']);
const dateOrDateTime = new Set(['Date', 'DateTime']);

/**
 * The type two operands share, for the operators that compare their items
 * (=, !=, in, contains, |, <…) and iif()'s branches: strings with strings,
 * numbers with numbers, Booleans with Booleans, dates and dateTimes with each
 * other, times with times, elements of one type with each other. Anything
 * else is refused: FHIRPath would compare such items by rules this compiler
 * does not translate (quantities' units), or the comparison is a type error
 * the R4 model shows.
 */
function common(left: Compiled, right: Compiled, expression: Expression): ItemType {
  for (const side of [left, right]) {
    if (side.type.kind === 'choice')
      throw new FhirPathRefused(describe(side.type), expression.at, 'a choice element is compared only once narrowed with ofType()');
    if (side.type.kind === 'element' && side.type.path === 'Quantity') throw new FhirPathRefused('Quantity', expression.at, quantitiesRefused);
  }
  if (left.type.kind === 'nothing') return right.type;
  if (right.type.kind === 'nothing') return left.type;
  if (left.type.kind === 'primitive' && right.type.kind === 'primitive') {
    if (left.type.name === right.type.name) return left.type;
    if (numeric.has(left.type.name) && numeric.has(right.type.name)) return { kind: 'primitive', name: 'Decimal', fhirType: 'decimal' };
    // A Date is a DateTime at a day's precision at most: FHIRPath compares the two.
    if (dateOrDateTime.has(left.type.name) && dateOrDateTime.has(right.type.name)) return { kind: 'primitive', name: 'DateTime', fhirType: 'dateTime' };
  }
  if (left.type.kind === 'element' && right.type.kind === 'element' && left.type.path === right.type.path) return left.type;
  throw new FhirPathRefused(
    describe(left.type),
    expression.at,
    `is compared with ${describe(right.type)}: items of different types, which FHIRPath does not compare as this compiler could`,
  );
}

function requireBoolean(compiled: Compiled, expression: Expression, what: string): void {
  const { type } = compiled;
  if (type.kind === 'nothing' || (type.kind === 'primitive' && type.name === 'Boolean')) return;
  throw new FhirPathRefused(what, expression.at, `must be a Boolean, and is ${describe(type)}`);
}

function requireString(compiled: Compiled, expression: Expression, what: string): void {
  const { type } = compiled;
  if (type.kind === 'nothing' || (type.kind === 'primitive' && type.name === 'String')) return;
  throw new FhirPathRefused(what, expression.at, `must be a String, and is ${describe(type)}`);
}
