/**
 * The query string of a request URL as the client sent it, still
 * percent-encoded: FHIR values keep '+' (time zones) and their own escapes,
 * which a decoded query would lose. The search parser decodes each part once.
 */
export function rawQueryOf(url: string): string {
  const questionMark = url.indexOf('?');
  return questionMark === -1 ? '' : url.slice(questionMark + 1);
}
