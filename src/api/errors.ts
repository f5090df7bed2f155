import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { FhirError, operationOutcome, type IssueCode, type OperationOutcome } from '../fhir/outcome.ts';

export const fhirJson = 'application/fhir+json; charset=utf-8';

export function sendOutcome(reply: FastifyReply, status: number, outcome: OperationOutcome): FastifyReply {
  return reply.code(status).type(fhirJson).send(outcome);
}

const issueCodeByStatus: Record<number, IssueCode> = {
  401: 'security',
  403: 'forbidden',
  404: 'not-found',
  405: 'not-supported',
  406: 'not-supported',
  413: 'too-costly',
  415: 'not-supported',
  429: 'throttled',
};

/**
 * Every error becomes an OperationOutcome: ours (FhirError) as they are,
 * request validation and Fastify's own 4xx errors with their message, and
 * anything else as a 500 whose details stay in the log.
 */
export function errorOutcome(error: FastifyError, request: FastifyRequest): { status: number; outcome: OperationOutcome } {
  if (error instanceof FhirError) return { status: error.status, outcome: error.outcome };
  if (hasZodFastifySchemaValidationErrors(error)) {
    const problems = error.validation.map((issue) => `${error.validationContext ?? 'request'}${issue.instancePath}: ${issue.message}`);
    return { status: 400, outcome: operationOutcome('invalid', problems.join('; ')) };
  }
  if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
    const sent = request.headers['content-type'] ?? 'none';
    return { status: 415, outcome: operationOutcome('not-supported', `Unsupported Content-Type '${sent}': send application/fhir+json or application/json`) };
  }
  const status = error.statusCode ?? 500;
  if (status >= 400 && status < 500) return { status, outcome: operationOutcome(issueCodeByStatus[status] ?? 'invalid', error.message) };
  // A 500 is a bug: its stack (a string) is what whoever fixes it needs.
  request.log.error({ err: error, stack: error.stack }, 'request failed');
  return { status: 500, outcome: operationOutcome('exception', 'Internal server error') };
}

export function installErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const { status, outcome } = errorOutcome(error, request);
    return sendOutcome(reply, status, outcome);
  });

  app.setNotFoundHandler((request, reply) =>
    sendOutcome(reply, 404, operationOutcome('not-found', `There is no ${request.method} ${request.url.split('?')[0]}`)),
  );
}
