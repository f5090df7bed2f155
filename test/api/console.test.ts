import { mkdirSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/auth/api-keys.ts';
import { startTestApp, type TestApp } from '../support/app.ts';
import { chromiumMissing, launchChromium } from '../support/chromium.ts';
import { startHealthyAndFailing, type HealthyAndFailing } from '../support/subscriptions.ts';

/** The delivery console in a real browser (test/support/chromium.ts). */
const screenshots = path.resolve('.ci/screenshots');

/**
 * What the page shows after a refresh: the console refreshes every second, so a poll waits for
 * several refreshes (a loaded machine can take longer than one), not one refresh period.
 */
const afterRefreshes = { timeout: 10_000 };

let t: TestApp;
let scene: HealthyAndFailing;
let browser: Browser;
let consoleUrl: string;
let apiKey: string;

beforeAll(async () => {
  if (chromiumMissing) return;
  t = await startTestApp();
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  consoleUrl = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}/console`;
  scene = await startHealthyAndFailing(t, {
    healthyCriteria: 'Patient?family=Shown',
    healthyEndpointQuery: '?token=console-token-value',
    healthyHeader: ['secret: console-secret-value'],
    failingStatus: 500,
  });
  apiKey = (await createApiKey(t.database.db, 'console', ['read', 'admin'])).key;
  browser = await launchChromium();
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await scene?.close();
  await t?.close();
});

/** A page of the console, with the errors its script throws or logs collected. */
async function openConsole(): Promise<{ page: Page; errors: string[] }> {
  const page = await browser.newPage();
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(error.message));
  page.on('console', (message) => (message.type() === 'error' ? errors.push(message.text()) : undefined));
  const response = await page.goto(consoleUrl);
  expect(response?.status()).toBe(200);
  expect(response?.headers()['content-security-policy']).toContain("script-src 'self'");
  return { page, errors };
}

describe.skipIf(chromiumMissing)("the delivery console in Chromium (Debian's chromium; skipped where it is missing, outside CI)", () => {
  it('refuses an unknown key, saying why', async () => {
    const { page, errors } = await openConsole();
    await page.fill('#key', 'not-a-key');
    await page.click('button[type=submit]');
    await expect.poll(() => page.textContent('#login-error'), afterRefreshes).toBe('Unknown or revoked API key');
    expect(await page.isVisible('#board')).toBe(false);
    // The one error is the refused request itself.
    expect(errors.filter((error) => !error.includes('401'))).toEqual([]);
    await page.close();
  });

  it("lists the subscriptions with their state, shows a failing one's calls, follows new calls live, and shows no secret", { timeout: 60_000 }, async () => {
    const { page, errors } = await openConsole();
    await page.fill('#key', apiKey);
    await page.click('button[type=submit]');
    const rows = page.locator('#subscriptions tbody tr');
    await expect.poll(() => rows.count(), afterRefreshes).toBe(2);
    const healthy = rows.filter({ hasText: 'Patient?family=Shown' });
    const failing = rows.filter({ hasText: 'Patient?family=Failing' });
    expect(await healthy.locator('.status').textContent()).toBe('active');
    expect(await healthy.textContent()).toContain('?token=***');
    expect(await failing.locator('.status').textContent()).toBe('error');
    // Its id (two rows alike differ by it), and the failed call that put it in error.
    expect(await failing.locator('td').nth(0).textContent()).toBe(scene.failing);
    expect(await failing.locator('td').nth(4).textContent()).toBe('1');
    // Deactivated once in the last 24 hours: not flapping.
    expect(await failing.locator('td').nth(5).textContent()).toBe('1');
    expect(await failing.locator('td.flapping').count()).toBe(0);
    expect(await failing.textContent()).toMatch(/HTTP 500 from http:\/\/127\.0\.0\.1:\d+\/hook; Patient\/\S+ \(version 1\) was not delivered/);

    // A failing subscription: its failed call, and the handshake before it.
    await failing.click();
    const attempts = page.locator('#attempts tbody tr');
    await expect.poll(() => attempts.count(), afterRefreshes).toBe(2);
    // With the subscriber's own answer, which says why.
    expect(await attempts.nth(0).textContent()).toMatch(/notification.*Patient\/\S+\/_history\/1.*500.*failed.*HTTP 500.*refused with 500/);
    expect(await attempts.nth(1).textContent()).toMatch(/handshake.*200.*delivered/);

    // A healthy one: a resource written now appears within the next refreshes.
    await healthy.click();
    await expect.poll(() => page.textContent('#detail-title'), afterRefreshes).toContain('Patient?family=Shown');
    const written = (await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Shown' }] })).json<{ id: string }>();
    const delivered = page.locator('#attempts tbody tr', { hasText: `Patient/${written.id}/_history/1` });
    await expect.poll(() => delivered.count(), { timeout: 15_000 }).toBe(1);
    expect(await delivered.locator('.status').textContent()).toBe('delivered');

    // Neither on the page nor in the data it reads.
    const text = (await page.textContent('body')) ?? '';
    const data = await Promise.all(
      ['/console/api/subscriptions', `/console/api/subscriptions/${scene.healthy}`].map(async (url) =>
        (await fetch(new URL(url, consoleUrl), { headers: { 'x-api-key': apiKey } })).text(),
      ),
    );
    expect(data[0]).toContain(scene.healthy);
    for (const secret of ['console-secret-value', 'console-token-value', apiKey]) {
      expect(text).not.toContain(secret);
      for (const json of data) expect(json).not.toContain(secret);
    }
    expect(errors).toEqual([]);
    mkdirSync(screenshots, { recursive: true });
    const screenshot = path.join(screenshots, 'console.png');
    await page.screenshot({ path: screenshot, fullPage: true });
    console.log(`console screenshot: ${screenshot}`);
    await page.close();
  });

  it('resends the event of a call on a click, and says why when it cannot', { timeout: 60_000 }, async () => {
    const writer = (await createApiKey(t.database.db, 'console writer', ['read', 'write', 'admin'])).key;
    const { page, errors } = await openConsole();
    await page.fill('#key', writer);
    await page.click('button[type=submit]');
    // A delivered event of the healthy subscription, sent again: a second delivered call of the same version.
    const written = (await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Shown' }] })).json<{ id: string }>();
    await page.locator('#subscriptions tbody tr', { hasText: 'Patient?family=Shown' }).click();
    const calls = page.locator('#attempts tbody tr', { hasText: `Patient/${written.id}/_history/1` });
    await expect.poll(() => calls.count(), { timeout: 15_000 }).toBe(1);
    await calls.locator('button.resend').click();
    await expect.poll(() => page.textContent('#resend-result'), afterRefreshes).toBe(`Queued Patient/${written.id}/_history/1`);
    await expect.poll(() => calls.count(), { timeout: 15_000 }).toBe(2);
    expect(await calls.nth(0).locator('.status').textContent()).toBe('delivered');

    // The failing subscription is in error: refused, with the reason.
    await page.locator('#subscriptions tbody tr', { hasText: 'Patient?family=Failing' }).click();
    const failed = page.locator('#attempts tbody tr', { hasText: 'notification' });
    await expect.poll(() => failed.count(), afterRefreshes).toBe(1);
    await failed.locator('button.resend').click();
    await expect
      .poll(() => page.textContent('#resend-result'))
      .toBe(
        `Not resent: Subscription/${scene.failing} is error: only an active subscription is sent to (one in error is reactivated by its next event, or at once by $reactivate; resend then)`,
      );
    // The browser logs the refused request itself; the page's script threw nothing.
    expect(errors.filter((error) => !error.includes('status of 400'))).toEqual([]);
    await page.close();
  });

  it(
    "opens a subscription from the keyboard and keeps the focus across refreshes; shows each call's id and event number, says when nothing is queued, and keeps times on one line",
    { timeout: 60_000 },
    async () => {
      const { page, errors } = await openConsole();
      await page.setViewportSize({ width: 900, height: 900 });
      await page.fill('#key', apiKey);
      await page.click('button[type=submit]');
      const rows = page.locator('#subscriptions tbody tr');
      await expect.poll(() => rows.count(), afterRefreshes).toBeGreaterThanOrEqual(2);

      // Tab from the page's start reaches the rows; Enter on the failing one opens it.
      // In the page's own terms (a string: this project's TypeScript has no DOM types).
      const focusedKey = () => page.evaluate<string | undefined>('document.activeElement?.dataset.key');
      for (let presses = 0; presses < 20 && (await focusedKey()) !== scene.failing; presses++) await page.keyboard.press('Tab');
      expect(await focusedKey()).toBe(scene.failing);
      await page.keyboard.press('Enter');
      await expect.poll(() => page.textContent('#detail-title'), afterRefreshes).toContain('Patient?family=Failing');
      // Two refreshes later the focus is still on that row (rebuilt), so Tab goes on from there.
      await page.waitForTimeout(2500);
      expect(await focusedKey()).toBe(scene.failing);

      // The failed notification's call id and event number, as the database has them.
      const { rows: recorded } = await t.database.pool.query<{ id: string; event_number: string }>(
        "SELECT id::text, event_number::text FROM webhook.delivery_attempts WHERE subscription_id = $1 AND kind = 'notification'",
        [scene.failing],
      );
      expect(recorded).toHaveLength(1);
      const call = page.locator('#attempts tbody tr', { hasText: 'notification' });
      await expect.poll(() => call.count(), afterRefreshes).toBe(1);
      expect(await call.locator('td').nth(1).textContent()).toBe(recorded[0]!.id);
      expect(await call.locator('td').nth(3).textContent()).toBe(recorded[0]!.event_number);

      // Nothing is queued for it: the page says so instead of showing an empty table.
      expect(await page.locator('#queued tbody tr').count()).toBe(0);
      expect(await page.isVisible('#queued-empty')).toBe(true);
      expect(await page.textContent('#queued-empty')).toContain('Nothing queued');

      // An instant is one line of text, however narrow the page.
      const timeLines = await page.evaluate<number>(`(() => {
      const range = document.createRange();
      range.selectNodeContents(document.querySelector('#attempts tbody tr td.time'));
      return new Set([...range.getClientRects()].map((rect) => Math.round(rect.top))).size;
    })()`);
      expect(timeLines).toBe(1);

      // A second deactivation in the last 24 hours: marked as flapping.
      await t.database.pool.query('INSERT INTO webhook.deactivation_alerts (subscription_id, recipients, reason) VALUES ($1, $2, $3)', [
        scene.failing,
        [],
        'HTTP 500 again',
      ]);
      const failing = rows.filter({ hasText: 'Patient?family=Failing' });
      await expect.poll(() => failing.locator('td.flapping').textContent(), afterRefreshes).toBe('2');
      expect(await failing.locator('td.flapping').getAttribute('title')).toMatch(/^Flapping: \d+ deactivations in a row without a delivery$/);
      // When an event may reactivate it: the next one; or, held back by the flapping backoff, one from an instant on.
      expect(await failing.locator('.next-reactivation').textContent()).toBe('The next event may reactivate it');
      const { rows: held } = await t.database.pool.query<{ until: Date }>(
        `UPDATE webhook.subscriptions SET deactivations_in_a_row = 3, reactivation_not_before = now() + interval '1 hour' WHERE id = $1 RETURNING reactivation_not_before AS until`,
        [scene.failing],
      );
      await expect
        .poll(() => failing.locator('.next-reactivation').textContent(), afterRefreshes)
        .toBe(`An event from ${held[0]!.until.toISOString()} on may reactivate it`);
      expect(await rows.filter({ hasText: 'Patient?family=Shown' }).locator('.next-reactivation').count()).toBe(0);
      expect(errors).toEqual([]);
      await page.close();
    },
  );
});
