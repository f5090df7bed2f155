import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * graphile-worker is used through its public API only: add_job, add_jobs,
 * complete_jobs, force_unlock_workers, the graphile_worker.jobs view, tasks,
 * crontab, run and its worker utils. Its private tables (_private_jobs,
 * _private_job_queues, _private_tasks, …) may change in any release: a
 * migration, function, source file or script that reads, writes or triggers on
 * them is a silent outage at the next upgrade. (Tests may look at them, to set
 * up what an older version of the service left behind.)
 */
const root = path.resolve(import.meta.dirname, '../..');
const scanned = ['db', 'src', 'scripts'];

async function filesUnder(folder: string): Promise<string[]> {
  const entries = await readdir(path.join(root, folder), { withFileTypes: true, recursive: true });
  return entries
    .filter((entry) => entry.isFile() && /\.(sql|ts|js)$/.test(entry.name))
    .map((entry) => path.relative(root, path.join(entry.parentPath, entry.name)));
}

describe("graphile-worker's private schema", () => {
  it(`is named nowhere in ${scanned.join('/, ')}/`, async () => {
    const files = (await Promise.all(scanned.map(filesUnder))).flat();
    expect(files.length).toBeGreaterThan(50);
    const offending: string[] = [];
    for (const file of files) {
      const lines = (await readFile(path.join(root, file), 'utf8')).split('\n');
      lines.forEach((line, index) => {
        if (/_private_(jobs|job_queues|tasks|known_crontabs)\b|graphile_worker\._private/i.test(line)) offending.push(`${file}:${index + 1}: ${line.trim()}`);
      });
    }
    expect(offending).toEqual([]);
  });
});
