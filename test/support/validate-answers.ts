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
 * An error in the service's answer fails the file, in every file. So does,
 * by default, an error in the content of a stored resource as its writer (the
 * test) wrote it (test/support/r4-validation.ts, attribute): the tests'
 * data is R4. A file that stores content that is not R4 on purpose (random
 * JSON, a text.div over 1 MB) says so at its top level with
 * storesInvalidContentOnPurpose(reason): its errors in stored content are
 * then printed with the reason, and do not fail it.
 *
 * R4_VALIDATION_REPORT=<file> appends, one JSON line each, every body with an
 * error or a warning, and each file's count and time spent checking.
 */

type Store = { answers: Answer[]; pending: Promise<unknown>[]; seen: Set<string>; invalidContentOnPurpose?: string };

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

/**
 * Called at a test file's top level: the file stores content that is not R4
 * on purpose, for the reason given (printed after its tests). The errors in
 * that content, as the file's tests wrote it, are reported and do not fail
 * the file; every other error still does (the service's answers, the
 * resources it renders, a stored resource's meta).
 */
export function storesInvalidContentOnPurpose(reason: string): void {
  const current = global[storeKey];
  if (current === undefined)
    throw new Error('storesInvalidContentOnPurpose: test/support/validate-answers.ts is not a setup file of this run (vitest.config.ts)');
  if (reason.trim() === '') throw new Error('storesInvalidContentOnPurpose: say why the file stores content that is not R4');
  current.invalidContentOnPurpose = reason;
}

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
/** Of the bodies (and of each body's errors) a file that stores invalid content on purpose is not failed for, those printed. */
const toleratedListedAtMost = 5;

// Vitest wants its hooks' first argument destructured (it reads fixtures from it): none here.
// eslint-disable-next-line no-empty-pattern
afterAll(async ({}, suite) => {
  await Promise.allSettled(store.pending);
  if (store.answers.length === 0) return;
  const started = performance.now();
  const { checkAnswer } = await import('./r4-validation.ts');
  const report = process.env.R4_VALIDATION_REPORT;
  const onPurpose = store.invalidContentOnPurpose;
  const file = suite.file.filepath;
  const invalid: string[] = [];
  /** Bodies whose only errors are in content the file stores invalid on purpose. */
  const tolerated: string[] = [];
  for (const answer of store.answers) {
    const { problems, stored, warnings, exemption } = checkAnswer(answer);
    const excerpt = answer.body.length > excerptLength ? `${answer.body.slice(0, excerptLength)}…` : answer.body;
    if (report !== undefined && problems.length + stored.length + warnings.length > 0) {
      appendFileSync(report, `${JSON.stringify({ file, ...answer, problems, stored, warnings, exemption, invalidContentOnPurpose: onPurpose })}\n`);
    }
    const inStored = stored.map((problem) => `${problem} (in content stored as written)`);
    const failures = [...problems, ...(onPurpose === undefined ? inStored : [])];
    const what =
      answer.source === 'api'
        ? `${answer.method} ${answer.url} answered ${answer.status}`
        : `notification ${answer.method} to ${answer.url} (answered ${answer.status})`;
    if (failures.length === 0) {
      if (inStored.length > 0) {
        const shown = inStored.slice(0, toleratedListedAtMost).map((problem) => `    - ${problem}`);
        tolerated.push(`${what}\n${shown.join('\n')}${inStored.length > shown.length ? `\n    … and ${inStored.length - shown.length} more` : ''}`);
      }
      continue;
    }
    // In a file that stores invalid content on purpose, the stored content's errors are listed too, as not failing.
    const listedProblems = [...failures, ...(onPurpose === undefined ? [] : inStored.map((problem) => `${problem}, not failing: on purpose`))];
    invalid.push(
      `${what}${exemption === undefined ? '' : ` [exempt as ${exemption}]`}\n${listedProblems.map((problem) => `    - ${problem}`).join('\n')}\n    body: ${excerpt}`,
    );
  }
  const elapsedMs = Math.round(performance.now() - started);
  if (report !== undefined) {
    appendFileSync(report, `${JSON.stringify({ file, checked: store.answers.length, invalid: invalid.length, tolerated: tolerated.length, elapsedMs })}\n`);
  }
  if (onPurpose !== undefined) {
    const listed = tolerated.slice(0, toleratedListedAtMost);
    console.warn(
      `${tolerated.length} of the ${store.answers.length} FHIR bodies this file's tests produced hold stored content that is not R4, ` +
        `not failing the file: it stores invalid content on purpose (${onPurpose}).` +
        `${listed.length === 0 ? '' : `\n\n${listed.join('\n\n')}`}` +
        `${tolerated.length > listed.length ? `\n\n… and ${tolerated.length - listed.length} more (R4_VALIDATION_REPORT=<file> writes them all)` : ''}`,
    );
  }
  if (invalid.length > 0) {
    const listed = invalid.slice(0, listedAtMost);
    throw new Error(
      `${invalid.length} of the ${store.answers.length} FHIR bodies this file's tests produced are not R4 JSON (test/support/r4-validation.ts):\n\n` +
        `${listed.join('\n\n')}${invalid.length > listed.length ? `\n\n… and ${invalid.length - listed.length} more` : ''}`,
    );
  }
});
