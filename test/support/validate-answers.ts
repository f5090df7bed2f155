import { appendFileSync } from 'node:fs';
import { subscribe } from 'node:diagnostics_channel';
import { performance } from 'node:perf_hooks';
import type { FastifyInstance } from 'fastify';
import { afterAll } from 'vitest';
import type { Answer } from './r4-validation.ts';

/**
 * Every test file's answers checked as FHIR R4 JSON (issue 25): a setup file
 * (vitest.config.ts) that collects, while a file's tests run,
 * - every answer of an API running in the test process: each Fastify
 *   instance gets an onSend hook when it is created (Fastify's
 *   `fastify.initialization` diagnostics channel), so startTestApp, a test's
 *   own buildApp and startService are all heard, whether driven by inject or
 *   over a socket; answers under /fhir/ or typed application/fhir+json;
 * - every answer the test process fetches from under /fhir/ with the global
 *   fetch: a `serve` or `api` the test spawned, too;
 * - every call a test receiver (test/support/receiver.ts) gets;
 * and, after the file's tests, checks each body (test/support/r4-validation.ts)
 * and fails the file listing those that are not R4.
 *
 * Not heard: what a test reads with another client (curl, undici's request),
 * notifications to a test's own HTTP server instead of startReceiver, and a
 * spawned process's calls to its own receivers.
 *
 * Errors in the content of stored resources, as their writer (the test)
 * wrote it, do not fail (test/support/r4-validation.ts, attribute):
 * R4_VALIDATION_STRICT=1 makes them fail too, to find test data that is not
 * R4. R4_VALIDATION_REPORT=<file> appends, one JSON line each, every body
 * with an error or a warning, and each file's count and time spent checking.
 */

type Store = { answers: Answer[]; pending: Promise<unknown>[]; seen: Set<string> };

const storeKey = Symbol.for('fhir-webhooks.r4-validation.store');
const installedKey = Symbol.for('fhir-webhooks.r4-validation.installed');
/** Where test/support/receiver.ts finds recordAnswer, without importing this file (which registers a hook). */
const recordKey = Symbol.for('fhir-webhooks.r4-validation.record');
type Global = typeof globalThis & { [storeKey]?: Store; [installedKey]?: boolean; [recordKey]?: (answer: Answer) => void };
const global = globalThis as Global;

/** This file's store: the hooks below (installed once a process) write to whichever file runs now. */
const store: Store = { answers: [], pending: [], seen: new Set() };
global[storeKey] = store;
global[recordKey] = recordAnswer;

/** Records one body to be checked after the current file's tests. */
function recordAnswer(answer: Answer): void {
  const current = global[storeKey];
  if (current === undefined) return;
  // The same answer heard twice (an in-process API fetched over a socket) is checked once.
  const key = `${answer.source} ${answer.method} ${answer.url} ${answer.status} ${answer.body}`;
  if (current.seen.has(key)) return;
  current.seen.add(key);
  current.answers.push(answer);
}

const isFhirAnswer = (url: string, contentType: string | undefined) => url.startsWith('/fhir/') || /fhir\+json/i.test(contentType ?? '');

if (global[installedKey] !== true) {
  global[installedKey] = true;
  subscribe('fastify.initialization', (message) => {
    const { fastify } = message as { fastify: FastifyInstance };
    // Added to the root before any route or plugin: every route inherits it. It runs first of the
    // onSend hooks; the service's own only add headers.
    fastify.addHook('onSend', async (request, reply, payload) => {
      const contentType = reply.getHeader('content-type');
      const type = typeof contentType === 'string' ? contentType : undefined;
      if ((typeof payload === 'string' || Buffer.isBuffer(payload)) && isFhirAnswer(request.url, type)) {
        recordAnswer({ source: 'api', method: request.method, url: request.url, status: reply.statusCode, contentType: type, body: payload.toString() });
      }
      return payload;
    });
  });
  const originalFetch = globalThis.fetch;
  globalThis.fetch = async (input, init) => {
    const response = await originalFetch(input, init);
    const url = new URL(response.url !== '' ? response.url : input instanceof Request ? input.url : String(input));
    if (url.pathname.startsWith('/fhir/')) {
      const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
      const contentType = response.headers.get('content-type') ?? undefined;
      const current = global[storeKey];
      const read = response
        .clone()
        .text()
        .then(
          (body) => recordAnswer({ source: 'api', method, url: `${url.pathname}${url.search}`, status: response.status, contentType, body }),
          () => undefined,
        );
      current?.pending.push(read);
    }
    return response;
  };
}

const excerptLength = 300;
const listedAtMost = 60;

// Vitest wants its hooks' first argument destructured (it reads fixtures from it): none here.
// eslint-disable-next-line no-empty-pattern
afterAll(async ({}, suite) => {
  await Promise.allSettled(store.pending);
  if (store.answers.length === 0) return;
  const started = performance.now();
  const { checkAnswer } = await import('./r4-validation.ts');
  const report = process.env.R4_VALIDATION_REPORT;
  const strict = process.env.R4_VALIDATION_STRICT === '1';
  const file = suite.file.filepath;
  const invalid: string[] = [];
  for (const answer of store.answers) {
    const { problems, stored, warnings, exemption } = checkAnswer(answer);
    const excerpt = answer.body.length > excerptLength ? `${answer.body.slice(0, excerptLength)}…` : answer.body;
    if (report !== undefined && problems.length + stored.length + warnings.length > 0) {
      appendFileSync(report, `${JSON.stringify({ file, ...answer, problems, stored, warnings, exemption })}\n`);
    }
    const failures = [...problems, ...(strict ? stored.map((problem) => `${problem} (in content stored as written)`) : [])];
    if (failures.length === 0) continue;
    const what = answer.source === 'api' ? `${answer.method} ${answer.url} answered ${answer.status}` : `notification ${answer.method} to ${answer.url} (answered ${answer.status})`;
    invalid.push(`${what}${exemption === undefined ? '' : ` [exempt as ${exemption}]`}\n${failures.map((problem) => `    - ${problem}`).join('\n')}\n    body: ${excerpt}`);
  }
  const elapsedMs = Math.round(performance.now() - started);
  if (report !== undefined) appendFileSync(report, `${JSON.stringify({ file, checked: store.answers.length, invalid: invalid.length, elapsedMs })}\n`);
  if (invalid.length > 0) {
    const listed = invalid.slice(0, listedAtMost);
    throw new Error(
      `${invalid.length} of the ${store.answers.length} FHIR bodies this file's tests produced are not R4 JSON (test/support/r4-validation.ts):\n\n` +
        `${listed.join('\n\n')}${invalid.length > listed.length ? `\n\n… and ${invalid.length - listed.length} more` : ''}`,
    );
  }
});
