import { readFileSync } from 'node:fs';
import { z } from 'zod';

/**
 * Reads the JSON report of a vitest run and exits non-zero unless tests ran
 * and none failed. `.ci/run` asks it for a second opinion on `npm test`'s exit
 * code, which a library's exit hook once turned into 0 on failing runs.
 * Usage: node scripts/check-test-report.ts <report.json>
 */
const report = z.object({
  success: z.boolean(),
  numTotalTestSuites: z.number(),
  numFailedTestSuites: z.number(),
  numTotalTests: z.number(),
  numPassedTests: z.number(),
  numFailedTests: z.number(),
  numPendingTests: z.number(),
  numTodoTests: z.number(),
});

function verdict(file: string): string[] {
  let parsed;
  try {
    parsed = report.parse(JSON.parse(readFileSync(file, 'utf8')));
  } catch (error) {
    return [`cannot read the test report ${file}: ${(error as Error).message}`];
  }
  const problems: string[] = [];
  if (parsed.numTotalTests === 0) problems.push('no test ran');
  if (parsed.numFailedTests > 0) problems.push(`${parsed.numFailedTests} tests failed`);
  if (parsed.numFailedTestSuites > 0) problems.push(`${parsed.numFailedTestSuites} test files or suites failed`);
  if (!parsed.success) problems.push('the run did not succeed');
  console.log(
    `Test report: ${parsed.numTotalTests} tests, ${parsed.numPassedTests} passed, ${parsed.numFailedTests} failed, ` +
      `${parsed.numPendingTests + parsed.numTodoTests} skipped or todo.`,
  );
  return problems;
}

const file = process.argv[2];
if (file === undefined) {
  console.error('Usage: node scripts/check-test-report.ts <report.json>');
  process.exit(2);
}
const problems = verdict(file);
if (problems.length > 0) {
  console.error(`Test report ${file}: ${problems.join('; ')}.`);
  process.exit(1);
}
