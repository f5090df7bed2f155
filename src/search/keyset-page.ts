/**
 * Keyset paging, as search and history page: no OFFSET, a page token is the
 * key of a row (its sort values) and the direction of the page it starts:
 * after that row (next) or before it (previous). A page before a token is
 * read in the reverse order, away from the token, then turned round. What a
 * key holds, and how it is checked before it reaches SQL, is each caller's.
 */

export type Direction = 'after' | 'before';

/** A token: base64url JSON, the key's values, then 'before' for a previous page. */
export function encodePageToken(key: readonly unknown[], direction: Direction): string {
  return Buffer.from(JSON.stringify(direction === 'after' ? key : [...key, direction])).toString('base64url');
}

/** The key (of `keyLength` values, unchecked) and direction of a token; undefined when it is not one. */
export function decodePageToken(token: string, keyLength: number): { key: unknown[]; direction: Direction } | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
  } catch {
    return undefined;
  }
  if (!Array.isArray(parsed)) return undefined;
  const [direction = 'after', ...rest] = parsed.slice(keyLength) as unknown[];
  if (parsed.length < keyLength || rest.length > 0 || (direction !== 'after' && direction !== 'before')) return undefined;
  return { key: parsed.slice(0, keyLength), direction };
}

/**
 * A page from the rows read away from its token, in the order read: at
 * most `count` of one more read (and fewer when `cut`, their bytes past a
 * bound), turned round for a previous page. Beyond the page in the
 * direction read lie more rows when one more was read or the read was cut;
 * the other way lies the token's own page.
 */
export function keysetPage<T>(
  read: readonly T[],
  { count, direction, fromToken, cut }: { count: number; direction: Direction; fromToken: boolean; cut: boolean },
) {
  const kept = read.slice(0, count);
  const items = direction === 'before' ? kept.reverse() : kept;
  const moreBeyond = read.length > count || cut;
  const first = items[0];
  const last = items.at(-1);
  return {
    items,
    /** The row a next page starts after, when there is one. */
    next: last !== undefined && (direction === 'before' || moreBeyond) ? last : undefined,
    /** The row a previous page ends before, when there is one. */
    previous: first !== undefined && (direction === 'before' ? moreBeyond : fromToken) ? first : undefined,
  };
}
