import { complexTypes, elementTypes, isResourceType } from '../fhir/definitions.ts';

/**
 * What the compiler knows of a collection's items from the R4 model
 * (src/fhir/definitions.ts): a primitive as FHIRPath sees it (a FHIR `code`
 * or `uri` is a String, `positiveInt` an Integer…), an element whose children
 * the model lists under `path` (a resource type, a complex type such as
 * `Coding`, or a backbone element's path such as `Observation.component`), or
 * a choice element (`Observation.value`) not yet narrowed by ofType().
 */
export type ItemType =
  | { kind: 'primitive'; name: PrimitiveName; fhirType: string }
  | { kind: 'element'; path: string }
  | { kind: 'choice'; path: string; types: readonly string[] }
  /** `{}`: the empty collection, of any type. */
  | { kind: 'nothing' };

export type PrimitiveName = 'Boolean' | 'String' | 'Integer' | 'Decimal' | 'Date' | 'DateTime' | 'Time';

const primitives: Record<string, PrimitiveName> = {
  boolean: 'Boolean',
  string: 'String',
  code: 'String',
  id: 'String',
  markdown: 'String',
  uri: 'String',
  url: 'String',
  canonical: 'String',
  oid: 'String',
  uuid: 'String',
  base64Binary: 'String',
  xhtml: 'String',
  'http://hl7.org/fhirpath/System.String': 'String',
  integer: 'Integer',
  positiveInt: 'Integer',
  unsignedInt: 'Integer',
  decimal: 'Decimal',
  date: 'Date',
  dateTime: 'DateTime',
  instant: 'DateTime',
  time: 'Time',
};

export const booleanType: ItemType = { kind: 'primitive', name: 'Boolean', fhirType: 'boolean' };
export const integerType: ItemType = { kind: 'primitive', name: 'Integer', fhirType: 'integer' };

/** The item type of a FHIR type name as the model writes it in an element's types. */
export function typeNamed(fhirType: string, elementPath: string): ItemType | { unsupported: string } {
  const primitive = primitives[fhirType];
  if (primitive !== undefined) return { kind: 'primitive', name: primitive, fhirType };
  if (fhirType === 'BackboneElement' || fhirType === 'Element') return { kind: 'element', path: elementPath };
  if (fhirType === 'Resource') return { unsupported: `${elementPath} holds a resource of any type, which the compiler cannot type` };
  if (complexTypes.has(fhirType) || isResourceType(fhirType)) return { kind: 'element', path: fhirType };
  return { unsupported: `${elementPath} is of type ${fhirType}, which the compiler does not know` };
}

/**
 * The items of `name` on items of `parent`, and whether the element repeats
 * (a JSON array; else it holds one value at most): undefined when the model
 * has no such element (a misspelt name, or a choice element's JSON name such
 * as `valueQuantity`, which FHIRPath writes `value.ofType(Quantity)`).
 */
export function childType(parent: ItemType & { kind: 'element' }, name: string): { type: ItemType; repeats: boolean } | { unsupported: string } | undefined {
  const path = `${parent.path}.${name}`;
  const definition = elementTypes.get(path);
  if (definition === undefined) return undefined;
  if (definition.choice) return { type: { kind: 'choice', path, types: definition.types }, repeats: definition.repeats };
  // A contentReference (Questionnaire.item.item: "the same as Questionnaire.item") carries no type in the model as read here.
  if (definition.types.length !== 1) return { unsupported: `${path} refers to another element's definition, which the compiler does not follow` };
  const type = typeNamed(definition.types[0]!, path);
  return 'unsupported' in type ? type : { type, repeats: definition.repeats };
}

/** A name for messages: `String`, `Coding`, `Observation.component`, `Observation.value[x]`. */
export function describe(type: ItemType): string {
  switch (type.kind) {
    case 'primitive':
      return type.name;
    case 'element':
      return type.path;
    case 'choice':
      return `${type.path}[x]`;
    case 'nothing':
      return 'the empty collection';
  }
}
