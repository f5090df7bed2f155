import type { FastifyInstance, FastifyRequest } from 'fastify';
import { badRequest } from '../fhir/outcome.ts';

/**
 * FHIR resources nest a few levels (a Questionnaire's items a few dozen):
 * deeper JSON is an attack on whatever walks it (PostgreSQL's jsonb, our
 * recursion), refused before it is parsed.
 */
export const maxJsonDepth = 100;

/**
 * The JSON body parser of the API, for application/json,
 * application/fhir+json and application/json-patch+json (PATCH): Fastify's (which refuses __proto__ and constructor
 * keys), after a linear scan for nesting deeper than maxJsonDepth.
 */
export function installJsonBodyParser(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  const parser = (request: FastifyRequest, body: string | Buffer, done: (error: Error | null, value?: unknown) => void) => {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    // No body at all (an operation invoked by POST without parameters, as FHIR clients send it): the route decides whether it needs one.
    if (text.trim() === '') return done(null, undefined);
    if (nestingExceeds(text, maxJsonDepth)) return done(badRequest(`The JSON body nests deeper than ${maxJsonDepth} levels`));
    // Fastify types the default parser as possibly async; it calls done either way.
    void parseJson(request, text, (error, value) => {
      // Fastify's own words blame the content type; the body is what is wrong: say where.
      if (error !== null && (error as { code?: string }).code === 'FST_ERR_CTP_INVALID_JSON_BODY')
        return done(badRequest(`The body is not valid JSON: ${jsonProblem(text)}`));
      // 1e400 (or 400 digits) parses as Infinity, which JSON cannot hold: stored, it would come back as null.
      if (error === null && /\d[eE]\+?\d{3}|\d{309}/.test(text) && holdsNonFiniteNumber(value))
        return done(badRequest('The body has a number too large for JSON (over about 1.8e308)'));
      done(error, value);
    });
  };
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, parser);
  app.addContentTypeParser('application/fhir+json', { parseAs: 'string' }, parser);
  app.addContentTypeParser('application/json-patch+json', { parseAs: 'string' }, parser);
}

/** Where JSON.parse stops on `text`, in its own words ("Expected ',' or ']' after array element in JSON at position 37 (line 1 column 38)"). */
function jsonProblem(text: string): string {
  try {
    JSON.parse(text);
    return 'it does not parse';
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

/** Whether brackets outside strings nest deeper than `limit`. */
function nestingExceeds(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let index = 0; index < text.length; index++) {
    const char = text.charCodeAt(index);
    if (inString) {
      if (char === 0x5c)
        index++; // a backslash escapes the next character
      else if (char === 0x22) inString = false;
    } else if (char === 0x22) {
      inString = true;
    } else if (char === 0x7b || char === 0x5b) {
      if (++depth > limit) return true;
    } else if (char === 0x7d || char === 0x5d) {
      depth--;
    }
  }
  return false;
}

/** Whether a parsed JSON value holds Infinity anywhere (a number literal past the largest double). */
function holdsNonFiniteNumber(value: unknown): boolean {
  if (typeof value === 'number') return !Number.isFinite(value);
  if (typeof value !== 'object' || value === null) return false;
  return Object.values(value).some(holdsNonFiniteNumber);
}
