import { defineConfig } from 'vitest/config';

/**
 * Files that measure time or rates, or run a compiler against deadlines: they run one at a
 * time after the others, so that no other file's load bends what they measure.
 */
const alone = ['test/dispatch/throttle.test.ts', 'test/docs/receivers.test.ts'];

export default defineConfig({
  test: {
    globalSetup: ['test/support/global-setup.ts'],
    // Every answer of the API and every notification a test produces, checked as FHIR R4 JSON after each file.
    setupFiles: ['test/support/validate-answers.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      {
        extends: true,
        // Most files wait (on receivers, worker processes, PostgreSQL) far more than they compute:
        // three at once on two cores, where vitest's default (cores - 1) would run them one by one.
        // Each file has its own database (test/support/database.ts), so they cannot meet.
        test: { name: 'together', include: ['test/**/*.test.ts'], exclude: alone, maxWorkers: 3 },
      },
      { extends: true, test: { name: 'alone', include: alone, fileParallelism: false, sequence: { groupOrder: 1 } } },
    ],
  },
});
