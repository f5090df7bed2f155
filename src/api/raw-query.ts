/**
 * The query string of a request URL as the client sent it, still
 * percent-encoded: FHIR values keep '+' (time zones) and their own escapes,
 * which a decoded query would lose. The search parser decodes each part once.
 */
export function rawQueryOf(url: string): string {
  const questionMark = url.indexOf('?');
  return questionMark === -1 ? '' : url.slice(questionMark + 1);
}

/** The `name=value` pairs of a raw query, as sent, without its page token: what a page's links carry on. */
export function pairsWithoutPageToken(rawQuery: string): string[] {
  return rawQuery.split('&').filter((pair) => pair !== '' && !/^_page_token(=|$)/.test(pair));
}

/** `url` with `pairs` and a page token: a next or previous link. */
export function linkWithPageToken(url: string, pairs: readonly string[], token: string): string {
  return `${url}?${[...pairs, `_page_token=${encodeURIComponent(token)}`].join('&')}`;
}
