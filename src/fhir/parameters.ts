import { z } from 'zod';
import { badRequest } from './outcome.ts';

/**
 * An operation's input, however it was invoked (FHIR: every operation may be
 * invoked by POST with a Parameters body; one whose parameters are all
 * primitives by GET with them in the URL too): a list of name and value
 * pairs, in the order given, as a URL query reads. Both forms are read the
 * same way after this.
 */
export type OperationInput = [name: string, value: string][];

/** The value[x] of a primitive parameter, as its URL form writes it. */
const primitiveValue = z.union([z.string(), z.number(), z.boolean()]);

const parameter = z.looseObject({ name: z.string().min(1, 'a parameter has a name') });

const parametersBody = z.object({
  resourceType: z.literal('Parameters', { error: 'the body of an operation is a Parameters resource' }),
  parameter: z.array(parameter).optional(),
});

/**
 * The parameters of a Parameters body as name and value pairs. A parameter
 * whose value is not a primitive (a resource, a part, a complex type) is
 * refused: the operations that read input this way take primitives only.
 */
export function parametersAsInput(body: unknown): OperationInput {
  if (body === undefined || body === null) return [];
  const parsed = parametersBody.safeParse(body);
  if (!parsed.success) throw badRequest(`The body must be a Parameters resource: ${parsed.error.issues[0]!.message}`, 'structure');
  return (parsed.data.parameter ?? []).map((item) => {
    const values = Object.entries(item).filter(([key]) => key.startsWith('value'));
    const value = values.length === 1 ? primitiveValue.safeParse(values[0]![1]) : undefined;
    if (value === undefined || !value.success) {
      throw badRequest(`Parameter '${item.name}' must have one primitive value (valueString, valueCode, valueInteger, …)`, 'structure');
    }
    return [item.name, String(value.data)];
  });
}

/**
 * What any interaction may carry about its answer's format, as FHIR clients
 * add it to every request (HAPI's `_format=json`): `_format` (JSON, or a 406
 * before any route: src/api/errors.ts) and `_pretty` (answers are compact
 * JSON either way). Read as no parameter by the operations and history.
 */
export const formatParameters: ReadonlySet<string> = new Set(['_format', '_pretty']);
