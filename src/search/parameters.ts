import { searchParameterDefinitions, type SearchParameterDefinition } from '../fhir/definitions.ts';
import { locatedPaths, relativePaths, UnsupportedExpression, type ElementPath } from './element-paths.ts';

export type ParameterType = 'token' | 'string' | 'reference' | 'date' | 'number' | 'quantity' | 'uri';

/** A search parameter of one resource type, ready to compile. */
export type SearchParameter = SimpleParameter | CompositeParameter;

export type SimpleParameter = {
  code: string;
  type: ParameterType;
  paths: ElementPath[];
  /** Resource types a reference parameter may point to. */
  targets: readonly string[];
};

/**
 * A composite (`component-code-value-quantity=http://loinc.org|8480-6$gt100`):
 * each of `roots` is an element (an Observation.component) whose components,
 * read from it, must all match, each its `$`-separated part.
 */
export type CompositeParameter = {
  code: string;
  type: 'composite';
  /** Per root, the components' parameters with paths relative to that root. */
  roots: { path: ElementPath; components: SimpleParameter[] }[];
};

/** A parameter's modifier as a query gives it (`:missing`, `:exact`, …), or a reference's target type (`:Patient`). */
export type Modifier = 'missing' | 'not' | 'exact' | 'contains' | 'text' | 'above' | 'below' | { type: string };

/** Why a defined parameter cannot be searched here. */
export type UnsupportedParameter = { code: string; unsupported: string };

const compilableTypes = new Set<string>(['token', 'string', 'reference', 'date', 'number', 'quantity', 'uri']);

const definitionsByUrl = new Map(searchParameterDefinitions.map((definition) => [definition.url, definition]));

const parametersByType = new Map<string, ReadonlyMap<string, SearchParameter | UnsupportedParameter>>();

/** Every search parameter R4 defines for a resource type (its own and those of Resource and DomainResource). */
export function searchParametersOf(resourceType: string): ReadonlyMap<string, SearchParameter | UnsupportedParameter> {
  let parameters = parametersByType.get(resourceType);
  if (!parameters) {
    parameters = new Map(
      searchParameterDefinitions
        .filter((definition) => definition.base.some((base) => base === resourceType || base === 'Resource' || base === 'DomainResource'))
        .map((definition) => [definition.code, resolve(definition, resourceType)]),
    );
    parametersByType.set(resourceType, parameters);
  }
  return parameters;
}

function resolveComposite(definition: SearchParameterDefinition, located: ReturnType<typeof locatedPaths>): CompositeParameter {
  const roots = located.map(({ path, definitionPath }) => ({
    path,
    components: (definition.component ?? []).map((component): SimpleParameter => {
      const componentDefinition = definitionsByUrl.get(component.definition);
      if (!componentDefinition || !compilableTypes.has(componentDefinition.type)) {
        throw new UnsupportedExpression(`component ${component.definition} is not a searchable parameter`);
      }
      return {
        code: componentDefinition.code,
        type: componentDefinition.type as ParameterType,
        paths: relativePaths(component.expression, definitionPath),
        targets: componentDefinition.target ?? [],
      };
    }),
  }));
  if (roots.some((root) => root.components.length < 2)) throw new UnsupportedExpression('a composite needs two components or more');
  for (const component of roots.flatMap((root) => root.components)) {
    const types = component.paths.flatMap((path) => path.at(-1)?.types ?? []);
    // R4's DocumentReference relationship pairs its relatesto (reference) component with the code element, and relation (token) with the target.
    const readable = component.type === 'reference' ? types.some((type) => referenceTypes.has(type)) : types.some((type) => !referenceTypes.has(type));
    if (types.length > 0 && !readable) {
      throw new UnsupportedExpression(`its ${component.code} component is a ${component.type} parameter over ${types.join(', ')}`);
    }
  }
  return { code: definition.code, type: 'composite', roots };
}

/** The element types a reference parameter reads (and other parameters do not). */
const referenceTypes = new Set(['Reference', 'canonical', 'Resource', 'Attachment']);

export function isSupported(parameter: SearchParameter | UnsupportedParameter): parameter is SearchParameter {
  return !('unsupported' in parameter);
}

function resolve(definition: SearchParameterDefinition, resourceType: string): SearchParameter | UnsupportedParameter {
  const { code, type, expression } = definition;
  if (type !== 'composite' && !compilableTypes.has(type)) return { code, unsupported: `${type} parameters are not supported` };
  if (!expression) return { code, unsupported: 'it has no FHIRPath expression' };
  try {
    const located = locatedPaths(expression, resourceType);
    if (located.length === 0) return { code, unsupported: `its expression has no path for ${resourceType}` };
    if (type === 'composite') return resolveComposite(definition, located);
    return { code, type: type as ParameterType, paths: located.map((root) => root.path), targets: definition.target ?? [] };
  } catch (error) {
    if (error instanceof UnsupportedExpression) return { code, unsupported: `its FHIRPath expression is beyond what compiles to SQL (${error.message})` };
    throw error;
  }
}
