import { complexTypes, elementTypes } from '../fhir/definitions.ts';

/**
 * The FHIRPath subset that R4 search parameters use, turned into plain
 * element paths: dotted names, `[n]`, unions `|`, `.where(resolve() is X)`,
 * `.where(element='value')`, and choice types through `.ofType(T)`, `as T` or
 * a bare choice element. Anything else is unsupported, never guessed.
 */

export type StepFilter =
  /** `.where(resolve() is Patient)`: a Reference whose target has one of these types. */
  | { kind: 'reference-to'; types: string[] }
  /** `.where(system='phone')`: an element whose child has this value. */
  | { kind: 'child-equals'; child: string; value: string };

/** One element of a path; `types` are its FHIR types when the definitions know them. */
export type PathStep = { name: string; index?: number; filter?: StepFilter; types?: readonly string[] };

/** One way to reach the parameter's values in a resource's JSON, from the root. */
export type ElementPath = readonly PathStep[];

export class UnsupportedExpression extends Error {
  override name = 'UnsupportedExpression';
}

/**
 * An element path with where it ends in the definitions ("Observation.component",
 * "UsageContext"), from which a composite parameter's components are read.
 */
export type LocatedPath = { path: ElementPath; definitionPath: string | undefined };

/** The element paths an expression selects in resources of `resourceType`, each with where it ends. */
export function locatedPaths(expression: string, resourceType: string): LocatedPath[] {
  const paths: LocatedPath[] = [];
  for (const branch of splitTopLevel(expression, '|')) {
    const text = unwrapParentheses(branch.trim());
    const root = /^([A-Z][A-Za-z]*)(?=\.|$)/.exec(text)?.[1];
    if (root === undefined) throw new UnsupportedExpression(`expression branch '${text}' does not start with a type`);
    if (root !== resourceType && root !== 'Resource' && root !== 'DomainResource') continue;
    paths.push(...parseBranch(text.slice(root.length), resourceType));
  }
  return paths;
}

/** The paths a composite's component expression ("code", "value.ofType(Quantity)") selects from an element at `definitionPath`. */
export function relativePaths(expression: string, definitionPath: string | undefined): ElementPath[] {
  return splitTopLevel(expression, '|').flatMap((branch) => {
    const text = unwrapParentheses(branch.trim());
    if (!/^[a-z]/.test(text)) throw new UnsupportedExpression(`component '${text}' is not a path from its element`);
    return parseBranch(`.${text}`, definitionPath).map((located) => located.path);
  });
}

/** A path being read: its steps so far, where it stands in the definitions, and whether its last step awaits a choice type. */
type Reading = { steps: PathStep[]; definitionPath: string | undefined; choiceTypes?: readonly string[] };

function parseBranch(rest: string, start: string | undefined): LocatedPath[] {
  let readings: Reading[] = [{ steps: [], definitionPath: start }];
  let text = rest;
  while (text.length > 0) {
    let match: RegExpExecArray | null;
    if ((match = /^(?:\.ofType\(([A-Za-z]+)\)|\.as\(([A-Za-z]+)\)|\s+as\s+([A-Za-z]+))/.exec(text))) {
      const type = (match[1] ?? match[2] ?? match[3])!;
      readings = readings.map((reading) => chooseType(reading, type));
    } else if ((match = /^\.where\(((?:[^()]|\([^()]*\))*)\)/.exec(text))) {
      const filter = parseWhere(match[1]!);
      readings = readings.flatMap(settleChoice).map((reading) => ({ ...reading, steps: withFilter(reading.steps, filter) }));
    } else if ((match = /^\[(\d+)\]/.exec(text))) {
      const index = Number(match[1]);
      readings = readings.flatMap(settleChoice).map((reading) => ({ ...reading, steps: withIndex(reading.steps, index) }));
    } else if ((match = /^\.([a-z][A-Za-z0-9]*)(?![A-Za-z0-9(])/.exec(text))) {
      const name = match[1]!;
      readings = readings.flatMap(settleChoice).map((reading) => child(reading, name));
    } else {
      throw new UnsupportedExpression(`cannot read '${text}'`);
    }
    text = text.slice(match[0].length);
  }
  return readings.flatMap(settleChoice).map((reading) => ({ path: reading.steps, definitionPath: reading.definitionPath }));
}

function child({ steps, definitionPath }: Reading, name: string): Reading {
  const path = definitionPath === undefined ? undefined : `${definitionPath}.${name}`;
  const element = path === undefined ? undefined : elementTypes.get(path);
  // An element defined by reference to another (ConceptMap's dependsOn, product) lists no type: unknown.
  const next = [...steps, { name, ...(element && !element.choice && element.types.length > 0 ? { types: element.types } : {}) }];
  if (element?.choice) return { steps: next, definitionPath: undefined, choiceTypes: element.types };
  // Into a data type (HumanName, UsageContext, ...) its own definition takes over; a backbone element stays in place.
  const type = element?.types.length === 1 ? element.types[0]! : undefined;
  const dataType = type !== undefined && type !== 'BackboneElement' && type !== 'Element' && complexTypes.has(type) ? type : undefined;
  return { steps: next, definitionPath: dataType ?? (element ? path : undefined) };
}

/** A choice element used without a type stands for each of its types ("valueQuantity", "valueString", ...). */
function settleChoice(reading: Reading): Reading[] {
  if (!reading.choiceTypes) return [reading];
  return reading.choiceTypes.map((type) => chooseType(reading, type));
}

function chooseType(reading: Reading, type: string): Reading {
  const last = reading.steps.at(-1);
  if (!last || !reading.choiceTypes) throw new UnsupportedExpression(`ofType(${type}) on an element that is not a choice`);
  // FHIRPath may name a primitive type capitalized (ofType(DateTime) for dateTime).
  const chosen =
    reading.choiceTypes.find((candidate) => candidate === type) ?? reading.choiceTypes.find((candidate) => candidate.toLowerCase() === type.toLowerCase());
  if (chosen === undefined) throw new UnsupportedExpression(`'${last.name}' cannot be of type ${type}`);
  const steps = [...reading.steps.slice(0, -1), { name: last.name + capitalize(chosen), types: [chosen] }];
  return { steps, definitionPath: complexTypes.has(chosen) ? chosen : undefined };
}

function withFilter(steps: PathStep[], filter: StepFilter): PathStep[] {
  const last = steps.at(-1);
  if (!last || last.filter) throw new UnsupportedExpression('where() must follow an element, once');
  return [...steps.slice(0, -1), { ...last, filter }];
}

function withIndex(steps: PathStep[], index: number): PathStep[] {
  const last = steps.at(-1);
  if (!last || last.index !== undefined || last.filter) throw new UnsupportedExpression('[n] must follow an element');
  return [...steps.slice(0, -1), { ...last, index }];
}

function parseWhere(condition: string): StepFilter {
  const resolveIs = /^resolve\(\)\s+is\s+([A-Z][A-Za-z]*)$/.exec(condition.trim());
  if (resolveIs) return { kind: 'reference-to', types: [resolveIs[1]!] };
  const equals = /^([a-z][A-Za-z0-9]*)\s*=\s*'([^']*)'$/.exec(condition.trim());
  if (equals) return { kind: 'child-equals', child: equals[1]!, value: equals[2]! };
  throw new UnsupportedExpression(`where(${condition})`);
}

function splitTopLevel(text: string, separator: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let quoted = false;
  let start = 0;
  for (let index = 0; index < text.length; index++) {
    const char = text[index];
    if (char === "'") quoted = !quoted;
    else if (!quoted && char === '(') depth++;
    else if (!quoted && char === ')') depth--;
    else if (!quoted && depth === 0 && char === separator) {
      parts.push(text.slice(start, index));
      start = index + 1;
    }
  }
  parts.push(text.slice(start));
  return parts;
}

function unwrapParentheses(text: string): string {
  let current = text;
  while (current.startsWith('(') && current.endsWith(')') && splitTopLevel(current.slice(1, -1), ')').length === 1) {
    current = current.slice(1, -1).trim();
  }
  // "(Observation.value.ofType(CodeableConcept)).text": drop the grouping around a leading path.
  const grouped = /^\(([^()]*(?:\([^()]*\))?[^()]*)\)(\..*)$/.exec(current);
  return grouped ? `${grouped[1]}${grouped[2]}` : current;
}

function capitalize(type: string): string {
  return type.charAt(0).toUpperCase() + type.slice(1);
}
