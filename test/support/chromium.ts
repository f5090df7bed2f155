import { spawnSync } from 'node:child_process';
import { chromium, type Browser } from 'playwright-core';

/**
 * Debian's Chromium, driven by playwright-core (.ci/run installs it). Pages
 * are tested in it; outside CI, where it is missing, those tests are skipped
 * (in CI they fail: the launch finds no browser).
 */
const chromiumPath = '/usr/bin/chromium';

export const chromiumMissing = spawnSync(chromiumPath, ['--version']).status !== 0 && process.env.CI === undefined;

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: chromiumPath,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}
