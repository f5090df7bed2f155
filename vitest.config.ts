import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    // Every answer of the API and every notification a test produces, checked as FHIR R4 JSON after each file.
    setupFiles: ['test/support/validate-answers.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
