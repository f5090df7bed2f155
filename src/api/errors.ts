import type { FastifyError, FastifyInstance, FastifyReply } from 'fastify';
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
export function installErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error instanceof FhirError) return sendOutcome(reply, error.status, error.outcome);
    if (hasZodFastifySchemaValidationErrors(error)) {
      const problems = error.validation.map((issue) => `${error.validationContext ?? 'request'}${issue.instancePath}: ${issue.message}`);
      return sendOutcome(reply, 400, operationOutcome('invalid', problems.join('; ')));
    }
    if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
      const sent = request.headers['content-type'] ?? 'none';
      return sendOutcome(reply, 415, operationOutcome('not-supported', `Unsupported Content-Type '${sent}': send application/fhir+json or application/json`));
    }
    const status = error.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      return sendOutcome(reply, status, operationOutcome(issueCodeByStatus[status] ?? 'invalid', error.message));
    }
    request.log.error({ err: error }, 'request failed');
    return sendOutcome(reply, 500, operationOutcome('exception', 'Internal server error'));
  });

  app.setNotFoundHandler((request, reply) =>
    sendOutcome(reply, 404, operationOutcome('not-found', `There is no ${request.method} ${request.url.split('?')[0]}`)),
  );
}
