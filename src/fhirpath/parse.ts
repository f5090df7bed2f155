import { createRequire } from 'node:module';
import type fhirpath from 'fhirpath';

/**
 * A FHIRPath expression as the compiler reads it, parsed by fhirpath.js
 * (HL7's JavaScript implementation, through its public `parse`): its grammar
 * is the specification's, so that what parses here parses in every other
 * FHIRPath engine. Each node keeps where it starts in the expression, for
 * the refusals to name.
 */
export type Location = { line: number; column: number };

export type Expression =
  /** A number's value is its text (`-1.50`); a date's or a time's its text without `@` and `T` (`2024-03`, `10:30`), as FHIR writes it. */
  | {
      kind: 'literal';
      type: 'String' | 'Boolean' | 'Integer' | 'Decimal' | 'Date' | 'DateTime' | 'Time' | 'Empty';
      value: string | boolean | null;
      at: Location;
    }
  | { kind: 'variable'; name: string; at: Location }
  | { kind: 'this'; at: Location }
  /** `input.name`, or `name` alone (input null: the expression's context). */
  | { kind: 'member'; input: Expression | null; name: string; at: Location }
  | { kind: 'call'; input: Expression | null; name: string; args: Expression[]; at: Location }
  | { kind: 'operator'; operator: string; left: Expression; right: Expression; at: Location }
  | { kind: 'type-operator'; operator: 'is' | 'as'; input: Expression; typeName: string; at: Location };

/** What the compiler does not take, and where it is: the topic is refused with this (src/topics/compile.ts). */
export class FhirPathRefused extends Error {
  override name = 'FhirPathRefused';
  readonly construct: string;
  readonly at: Location | null;
  readonly reason: string;
  constructor(construct: string, at: Location | null, reason: string) {
    super(`${at === null ? '' : `at line ${at.line}, column ${at.column}: `}${construct}: ${reason}`);
    this.construct = construct;
    this.at = at;
    this.reason = reason;
  }
}

/**
 * Why quantities are refused: FHIRPath compares them across units (fhirpath.js converts by UCUM: 0.005 'g' = 5 'mg',
 * 2 'wk' = 14 days), and the units a resource writes are known only when it is written, so comparing only where
 * the units agree would answer otherwise than FHIRPath wherever they do not.
 */
export const quantitiesRefused =
  "quantities are not compared: FHIRPath converts their units by UCUM (0.005 'g' = 5 'mg'), which the compiler does not translate; compare their values (value.ofType(Quantity).value > 5) where the unit is known";

type Node = { type: string; text?: string; start?: Location; children?: Node[] };

/**
 * fhirpath.js, loaded on the first parse rather than with this module: it
 * costs a process about 24 MiB and 90 ms (antlr4 and UCUM with it), which
 * the delivery workers, that never compile a criteria, should not pay.
 */
let fhirpathParse: typeof fhirpath.parse | undefined;
function parseWithFhirPathJs(expression: string): Node {
  fhirpathParse ??= (createRequire(import.meta.url)('fhirpath') as typeof fhirpath).parse;
  return fhirpathParse(expression) as Node;
}

export function parseFhirPath(expression: string): Expression {
  let tree: Node;
  try {
    tree = parseWithFhirPathJs(expression);
  } catch (error) {
    throw new FhirPathRefused('the expression', null, `is not FHIRPath: ${(error as Error).message.split('\n')[0]}`);
  }
  return read(tree);
}

function locate(node: Node): Location {
  if (node.start !== undefined) return node.start;
  for (const child of node.children ?? []) {
    const found = locate(child);
    if (found.line > 0) return found;
  }
  return { line: 0, column: 0 };
}

function only(node: Node): Node {
  const children = node.children ?? [];
  if (children.length !== 1) throw new FhirPathRefused(node.type, locate(node), 'unexpected shape from the parser');
  return children[0]!;
}

const binaryOperators = new Set([
  'UnionExpression',
  'InequalityExpression',
  'EqualityExpression',
  'MembershipExpression',
  'AndExpression',
  'OrExpression',
  'ImpliesExpression',
]);

function read(node: Node): Expression {
  const at = locate(node);
  if (binaryOperators.has(node.type)) {
    const [left, right] = node.children!;
    return { kind: 'operator', operator: node.text!, left: read(left!), right: read(right!), at };
  }
  switch (node.type) {
    case 'EntireExpression':
    case 'TermExpression':
    case 'ParenthesizedTerm':
      return read(only(node));
    case 'InvocationTerm':
      return invocation(only(node), null);
    case 'InvocationExpression': {
      const [input, invoked] = node.children!;
      return invocation(invoked!, read(input!));
    }
    case 'ExternalConstantTerm':
      return { kind: 'variable', name: identifier(only(only(node))), at };
    case 'LiteralTerm':
      return literal(only(node), at);
    case 'PolarityExpression': {
      const operand = read(only(node));
      if (operand.kind === 'literal' && (operand.type === 'Integer' || operand.type === 'Decimal')) {
        return { ...operand, value: node.text === '-' ? `-${String(operand.value)}` : operand.value, at };
      }
      throw new FhirPathRefused(`the sign ${node.text}`, at, 'arithmetic is not supported; a sign is taken only before a number');
    }
    case 'TypeExpression': {
      const [input, specifier] = node.children!;
      return { kind: 'type-operator', operator: node.text as 'is' | 'as', input: read(input!), typeName: qualifiedName(specifier!), at };
    }
    case 'AdditiveExpression':
    case 'MultiplicativeExpression':
      throw new FhirPathRefused(`the operator ${node.text}`, at, 'arithmetic is not supported');
    case 'IndexerExpression':
      throw new FhirPathRefused('an indexer [ ]', at, 'not supported; first() and last() are');
    default:
      throw new FhirPathRefused(node.type, at, 'not supported');
  }
}

function invocation(node: Node, input: Expression | null): Expression {
  const at = locate(node);
  switch (node.type) {
    case 'MemberInvocation':
      return { kind: 'member', input, name: identifier(only(node)), at };
    case 'FunctionInvocation': {
      const [name, parameters] = only(node).children!;
      return { kind: 'call', input, name: identifier(name!), args: (parameters?.children ?? []).map(read), at };
    }
    case 'ThisInvocation':
      if (input !== null) throw new FhirPathRefused('$this', at, 'only at the start of a path');
      return { kind: 'this', at };
    default:
      throw new FhirPathRefused(node.type === 'IndexInvocation' ? '$index' : node.type === 'TotalInvocation' ? '$total' : node.type, at, 'not supported');
  }
}

/** An identifier's name, without the backticks of a delimited one (`` `div` ``). */
function identifier(node: Node): string {
  const text = node.text ?? '';
  return text.startsWith('`') && text.endsWith('`') ? text.slice(1, -1) : text;
}

/** `Quantity` or `FHIR.Quantity` in `is`, `as` and `ofType()`. */
function qualifiedName(node: Node): string {
  const parts: string[] = [];
  const walk = (current: Node) => {
    if (current.type === 'Identifier') parts.push(identifier(current));
    for (const child of current.children ?? []) walk(child);
  };
  walk(node);
  return parts.join('.');
}

function literal(node: Node, at: Location): Expression {
  const text = node.text ?? '';
  switch (node.type) {
    case 'NullLiteral':
      return { kind: 'literal', type: 'Empty', value: null, at };
    case 'BooleanLiteral':
      return { kind: 'literal', type: 'Boolean', value: text === 'true', at };
    case 'StringLiteral':
      return { kind: 'literal', type: 'String', value: unescape(text.slice(1, -1), at), at };
    case 'NumberLiteral':
      // Kept as written: a JSON number of any precision, as jsonb keeps it.
      return { kind: 'literal', type: text.includes('.') ? 'Decimal' : 'Integer', value: text, at };
    case 'DateLiteral':
      return { kind: 'literal', type: 'Date', value: text.slice(1), at };
    case 'DateTimeLiteral':
      return { kind: 'literal', type: 'DateTime', value: text.slice(1), at };
    case 'TimeLiteral':
      return { kind: 'literal', type: 'Time', value: text.slice(2), at };
    case 'QuantityLiteral':
      // The parser's text runs the number and the unit together (5'mg').
      throw new FhirPathRefused(`the quantity ${text.replace(/^([-+]?[\d.]+)\s*/, '$1 ')}`, at, quantitiesRefused);
    default:
      throw new FhirPathRefused(node.type, at, 'not supported');
  }
}

const escapes: Record<string, string> = { "'": "'", '"': '"', '`': '`', '\\': '\\', '/': '/', f: '\f', n: '\n', r: '\r', t: '\t' };

/** A string literal's escapes (FHIRPath's, as JSON's with `\'` and `` \` ``). */
function unescape(text: string, at: Location): string {
  return text.replace(/\\(u[0-9a-fA-F]{4}|.)/g, (whole, escape: string) => {
    if (escape.startsWith('u') && escape.length === 5) return String.fromCharCode(parseInt(escape.slice(1), 16));
    const replacement = escapes[escape];
    if (replacement === undefined) throw new FhirPathRefused(`the escape ${whole}`, at, 'not a FHIRPath escape');
    return replacement;
  });
}
