import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

/**
 * The README and every page of docs/ name files of the repository (`docs/search.md`,
 * `src/topics/compile.ts`, `test/dispatch/throttle.test.ts`…): each must exist, so that
 * a newcomer following a pointer finds what it points at. Paths with a
 * placeholder (`<id>`, `…`, `*`) are patterns, not files, and are left out,
 * and so are what the tests write (`.ci/screenshots/`, made by the console
 * test when Chromium is there): they exist only after a run, in any order.
 */

const pages = [
  'README.md',
  ...readdirSync('docs')
    .filter((file) => file.endsWith('.md'))
    .map((file) => `docs/${file}`),
];
const repositoryPath = /`((?:docs|src|test|scripts|examples|db|monitoring|\.ci)\/[^`\s]*)`/g;
const markdownLink = /\]\(((?!https?:|#|mailto:)[^)\s]+)\)/g;

function namedFiles(page: string): string[] {
  const text = readFileSync(page, 'utf8');
  const named = [...text.matchAll(repositoryPath), ...text.matchAll(markdownLink)].map((match) => match[1]!.replace(/[.,;:]$/, '').split('#')[0]!);
  return [...new Set(named)].filter((file) => file !== '' && !/[<>*…{}|$]/.test(file) && !file.startsWith('.ci/screenshots/'));
}

describe('the files the README and docs/ name', () => {
  it('are found in the pages (the check reads something)', () => {
    expect(pages).toContain('docs/performance.md');
    expect(namedFiles('README.md')).toContain('docs/search.md');
  });

  it.each(pages)('%s: every file it names exists', (page) => {
    expect(namedFiles(page).filter((file) => !existsSync(file))).toEqual([]);
  });
});
