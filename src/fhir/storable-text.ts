/**
 * What makes a string unstorable: a NUL character, or a lone UTF-16
 * surrogate (not Unicode). PostgreSQL refuses both in text, jsonb and
 * jsonpath; checked where text comes in, so that the answer is a 400 naming
 * it rather than a 500 from the database.
 */
export function stringProblem(text: string): string | undefined {
  if (text.includes('\u0000')) return 'a NUL character';
  if (!text.isWellFormed()) return 'a lone UTF-16 surrogate';
  return undefined;
}

/** What is wrong with the first string (key or value) that PostgreSQL cannot store, if any. */
export function unstorableString(value: unknown): string | undefined {
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const item = pending.pop();
    if (typeof item === 'string') {
      const problem = stringProblem(item);
      if (problem !== undefined) return problem;
    } else if (Array.isArray(item)) {
      pending.push(...(item as unknown[]));
    } else if (item !== null && typeof item === 'object') {
      for (const [key, child] of Object.entries(item)) {
        const problem = stringProblem(key);
        if (problem !== undefined) return problem;
        pending.push(child);
      }
    }
  }
  return undefined;
}
