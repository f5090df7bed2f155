import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * EMBEDDED_DATA_DIR, made if missing, with a `.gitignore` that ignores all of
 * it: the folder holds the database's password, the secrets encryption key and
 * the first API key, and may be inside a checkout under any name
 * (`EMBEDDED_DATA_DIR=.data-op`), which the project's own .gitignore cannot
 * foresee. A `.gitignore` already there is left as it is (the folder may be
 * somebody's own).
 */
export async function makeDataDir(dataDir: string): Promise<string> {
  const root = path.resolve(dataDir);
  await mkdir(root, { recursive: true, mode: 0o755 });
  await writeFile(path.join(root, '.gitignore'), ignoreEverything, { flag: 'wx' }).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== 'EEXIST') throw error;
  });
  return root;
}

const ignoreEverything = '# Written by fhir-webhooks: this folder holds secrets (database password, encryption key, API key). Never commit it.\n*\n';
