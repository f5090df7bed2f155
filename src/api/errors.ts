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
    // An empty body reaches the route as none (an operation by POST may have none): a route that needs one says so.
    if (error.validationContext === 'body' && (request.body === undefined || request.body === null)) {
      return { status: 400, outcome: operationOutcome('invalid', 'The request body is empty: this interaction takes a FHIR resource (application/fhir+json)') };
    }
    const problems = error.validation.map((issue) => `${error.validationContext ?? 'request'}${issue.instancePath}: ${issue.message}`);
    return { status: 400, outcome: operationOutcome('invalid', problems.join('; ')) };
  }
  if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
    const sent = request.headers['content-type'] ?? 'none';
    return { status: 415, outcome: operationOutcome('not-supported', `Unsupported Content-Type '${sent}': send application/fhir+json or application/json`) };
  }
  // A date the API's own checks let through and PostgreSQL refuses (out of range, malformed): the request's fault, not a bug.
  if (error.code === '22007' || error.code === '22008')
    return { status: 400, outcome: operationOutcome('invalid', `A date or time in the request is not valid: ${error.message}`) };
  const unavailable = databaseUnavailable(error);
  if (unavailable !== undefined) {
    request.log.warn({ err: error }, 'database unavailable for the request');
    return { status: 503, outcome: unavailable };
  }
  const status = error.statusCode ?? 500;
  if (status >= 400 && status < 500) return { status, outcome: operationOutcome(issueCodeByStatus[status] ?? 'invalid', error.message) };
  // A 500 is a bug: its stack (a string) is what whoever fixes it needs.
  request.log.error({ err: error, stack: error.stack }, 'request failed');
  return { status: 500, outcome: operationOutcome('exception', 'Internal server error') };
}

/**
 * A request the database could not serve for a reason that is not the
 * request's fault, or not for good: a statement past the API's
 * statement_timeout, a row lock past its lock_timeout, a deadlock or a
 * serialization failure (sent again, it succeeds), a server restarting or
 * unreachable. 503, so that clients retry (src/service.ts sets the bounds).
 */
function databaseUnavailable(error: Error & { code?: unknown }): OperationOutcome | undefined {
  const code = typeof error.code === 'string' ? error.code : '';
  if (code === '57014') return operationOutcome('timeout', 'The request took longer than the database allows an API request (30 s): narrow it, or retry later');
  if (code === '55P03') return operationOutcome('lock-error', 'A resource the request writes is locked by another transaction: retry later');
  // Two transactions that waited for each other (conditional writes of two Bundles in opposite orders, say): one is cancelled, and may be sent again.
  if (code === '40P01' || code === '40001')
    return operationOutcome('transient', 'The request conflicted with a concurrent one and was rolled back: send it again');
  const down =
    code.startsWith('08') || // connection exceptions
    code === '57P01' ||
    code === '57P02' ||
    code === '57P03' || // shutdown, crash, cannot connect now
    ['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT'].includes(code) ||
    /Connection terminated|timeout exceeded when trying to connect/.test(error.message);
  return down ? operationOutcome('transient', 'The database is unavailable: retry later') : undefined;
}

/**
 * The service's error answers. A path that a route serves for other methods
 * is a 405 naming them (FHIR: the interaction is not supported there), also
 * when a route with a parameter took the request only to refuse it (DELETE
 * /metadata reached DELETE /{Type}; GET /Patient/_search reached GET
 * /{Type}/{id}); a route that does not exist is a 404 saying so; a FHIR path
 * outside `fhirBasePath` (GET /fhir/Patient, say: another server's base)
 * says where the FHIR routes are.
 */
export function installErrorHandlers(app: FastifyInstance, fhirBasePath: string): void {
  const notSupported = (request: FastifyRequest, reply: FastifyReply, allowed: string[]) => {
    const path = pathOf(request);
    reply.header('allow', allowed.join(', '));
    return sendOutcome(reply, 405, operationOutcome('not-supported', `${request.method} is not supported on ${path}: it answers ${allowed.join(', ')}`));
  };

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const { status, outcome } = errorOutcome(error, request);
    if (status === 400 || status === 404) {
      const allowed = methodsServedMoreExactly(app, request);
      if (allowed.length > 0) return notSupported(request, reply, allowed);
    }
    return sendOutcome(reply, status, outcome);
  });

  app.setNotFoundHandler((request, reply) => {
    const path = pathOf(request);
    const allowed = routedMethods.filter((method) => method !== request.method && app.findRoute({ method, url: path }) !== null);
    if (allowed.length > 0) return notSupported(request, reply, allowed);
    const elsewhere = path.startsWith('/fhir/') && !path.startsWith(`${fhirBasePath}/`);
    const hint = elsewhere ? `: the FHIR base of this service is ${fhirBasePath} (${request.method} ${fhirBasePath}${path.slice('/fhir'.length)})` : '';
    return sendOutcome(reply, 404, operationOutcome('not-found', `There is no ${request.method} ${path}${hint}`));
  });
}

const pathOf = (request: FastifyRequest) => request.url.split('?')[0]!;

/**
 * The other methods whose route for this path names more of it than the
 * route that took the request (fewer parameters: /metadata rather than
 * /{Type}): the path is theirs, and this method is not served on it.
 */
function methodsServedMoreExactly(app: FastifyInstance, request: FastifyRequest): string[] {
  const taken = Object.keys(request.params ?? {}).length;
  if (taken === 0) return [];
  return routedMethods.filter((method) => {
    if (method === request.method) return false;
    const route = app.findRoute({ method, url: pathOf(request) });
    return route !== null && Object.keys(route.params).length < taken;
  });
}

/** The methods the service's routes use: a path served for some of them is a 405 for the others. */
const routedMethods = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/** The media types the FHIR API answers in: FHIR JSON, under its names old and new. */
const servedMediaTypes = ['application/fhir+json', 'application/json', 'application/json+fhir'];
/** `_format` values meaning JSON (FHIR's short form, and the media types). */
const jsonFormats = new Set(['json', ...servedMediaTypes]);

/**
 * A 406 for a request that accepts only formats the API does not serve
 * (FHIR XML or RDF, say): its `_format`, which FHIR lets override Accept,
 * or else its Accept header. Without either, or with a wildcard, JSON is fine.
 */
export function unservedFormat(accept: string | undefined, format: string | undefined): FhirError | undefined {
  if (format !== undefined) {
    const name = format.split(';')[0]!.trim().toLowerCase();
    return jsonFormats.has(name)
      ? undefined
      : new FhirError(406, 'not-supported', `_format=${format} is not served: this server answers FHIR JSON only (_format=json)`);
  }
  if (accept === undefined || accept.trim() === '') return undefined;
  const ranges = accept.split(',').map((range) => range.split(';')[0]!.trim().toLowerCase());
  const servable = ranges.some((range) => range === '*/*' || range === 'application/*' || servedMediaTypes.includes(range));
  return servable
    ? undefined
    : new FhirError(406, 'not-supported', `Accept: ${accept} is not served: this server answers application/fhir+json (or application/json) only`);
}
