import { searchParameterDefinitions, type SearchParameterDefinition } from '../fhir/definitions.ts';
import { elementPaths, UnsupportedExpression, type ElementPath } from './element-paths.ts';

export type ParameterType = 'token' | 'string' | 'reference' | 'date' | 'number' | 'quantity' | 'uri';

/** A search parameter of one resource type, ready to compile. */
export type SearchParameter = {
  code: string;
  type: ParameterType;
  paths: ElementPath[];
  /** Resource types a reference parameter may point to. */
  targets: readonly string[];
};

/** Why a defined parameter cannot be searched here. */
export type UnsupportedParameter = { code: string; unsupported: string };

const compilableTypes = new Set<string>(['token', 'string', 'reference', 'date', 'number', 'quantity', 'uri']);

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

export function isSupported(parameter: SearchParameter | UnsupportedParameter): parameter is SearchParameter {
  return !('unsupported' in parameter);
}

function resolve(definition: SearchParameterDefinition, resourceType: string): SearchParameter | UnsupportedParameter {
  const { code, type, expression } = definition;
  if (!compilableTypes.has(type)) return { code, unsupported: `${type} parameters are not supported` };
  if (!expression) return { code, unsupported: 'it has no FHIRPath expression' };
  try {
    const paths = elementPaths(expression, resourceType);
    if (paths.length === 0) return { code, unsupported: `its expression has no path for ${resourceType}` };
    return { code, type: type as ParameterType, paths, targets: definition.target ?? [] };
  } catch (error) {
    if (error instanceof UnsupportedExpression) return { code, unsupported: `its FHIRPath expression is beyond what compiles to SQL (${error.message})` };
    throw error;
  }
}
