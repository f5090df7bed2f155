import type { FastifyInstance, FastifyRequest } from 'fastify';
import { badRequest } from '../fhir/outcome.ts';

/**
 * FHIR resources nest a few levels (a Questionnaire's items a few dozen):
 * deeper JSON is an attack on whatever walks it (PostgreSQL's jsonb, our
 * recursion), refused before it is parsed.
 */
export const maxJsonDepth = 100;

/**
 * The JSON body parser of the API, for application/json and
 * application/fhir+json: Fastify's (which refuses __proto__ and constructor
 * keys), after a linear scan for nesting deeper than maxJsonDepth.
 */
export function installJsonBodyParser(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  const parser = (request: FastifyRequest, body: string | Buffer, done: (error: Error | null, value?: unknown) => void) => {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    if (nestingExceeds(text, maxJsonDepth)) return done(badRequest(`The JSON body nests deeper than ${maxJsonDepth} levels`));
    // Fastify types the default parser as possibly async; it calls done either way.
    void parseJson(request, text, done);
  };
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, parser);
  app.addContentTypeParser('application/fhir+json', { parseAs: 'string' }, parser);
}

/** Whether brackets outside strings nest deeper than `limit`. */
function nestingExceeds(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let index = 0; index < text.length; index++) {
    const char = text.charCodeAt(index);
    if (inString) {
      if (char === 0x5c) index++; // a backslash escapes the next character
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

