import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers } from '../../src/dispatch/worker.ts';
import dashboard from '../../monitoring/grafana/dashboards/fhir-webhooks.json' with { type: 'json' };
import { baseUrl, startTestApp, testSecretsKey } from '../support/app.ts';
import { freePort, startReceiver, waitFor } from '../support/receiver.ts';
import { subscribe, untilStatus } from '../support/subscriptions.ts';

/**
 * A real Prometheus (Debian's `prometheus` package; .ci/run installs it)
 * scrapes the service with the repository's scrape configuration while it
 * delivers, and its HTTP API is asked for the delivery counter. promtool
 * checks the configuration and the exposition. Without the package outside
 * CI, the suite is skipped, saying so.
 */
const installed = spawnSync('prometheus', ['--version']).status === 0 && spawnSync('promtool', ['--version']).status === 0;
const repositoryConfig = path.resolve('monitoring/prometheus.yml');

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** promtool's verdict on some text: its exit code and what it printed. */
function promtool(args: string[], input?: string): { status: number | null; output: string } {
  const result = spawnSync('promtool', args, { input, encoding: 'utf8' });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

describe.skipIf(!installed && process.env.CI === undefined)(
  "a real Prometheus scraping the service (Debian's prometheus package; skipped where it is missing, outside CI)",
  () => {
    it("promtool accepts the repository's scrape configuration", () => {
      const { status, output } = promtool(['check', 'config', repositoryConfig]);
      expect(output).toContain('SUCCESS');
      expect(status).toBe(0);
    });

    it(
      'scrapes /metrics during real deliveries, and its query API reports the delivery counter; promtool accepts the exposition',
      { timeout: 90_000 },
      async () => {
        const t = await startTestApp({ metrics: true });
        cleanups.push(() => t.close());
        const { app } = t;
        await app.listen({ port: 0, host: '127.0.0.1' });
        const servicePort = (app.server.address() as AddressInfo).port;
        const workers = await startWorkers(
          loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' }),
          t.database,
          testSecretsKey,
          pino({ level: 'silent' }),
          t.metrics,
        );
        cleanups.push(() => workers.stop());
        const receiver = await startReceiver();
        cleanups.push(() => receiver.close());

        // The repository's configuration, its target pointed at this service and scraped every second.
        const dir = await mkdtemp(path.join(tmpdir(), 'prometheus-'));
        cleanups.push(() => rm(dir, { recursive: true, force: true }));
        const config = (await readFile(repositoryConfig, 'utf8'))
          .replace("'service:8080'", `'127.0.0.1:${servicePort}'`)
          .replace(/scrape_interval: \d+s/, 'scrape_interval: 1s');
        expect(config).toContain(`127.0.0.1:${servicePort}`);
        await writeFile(path.join(dir, 'prometheus.yml'), config);
        const prometheusPort = await freePort();
        const prometheus = spawn(
          'prometheus',
          [
            `--config.file=${path.join(dir, 'prometheus.yml')}`,
            `--storage.tsdb.path=${path.join(dir, 'data')}`,
            `--web.listen-address=127.0.0.1:${prometheusPort}`,
          ],
          { stdio: ['ignore', 'pipe', 'pipe'] },
        );
        let log = '';
        prometheus.stdout.on('data', (chunk: Buffer) => (log += chunk.toString()));
        prometheus.stderr.on('data', (chunk: Buffer) => (log += chunk.toString()));
        const exited = new Promise((resolve) => prometheus.once('exit', resolve));
        cleanups.push(async () => {
          prometheus.kill('SIGTERM');
          await exited;
        });
        const prometheusApi = `http://127.0.0.1:${prometheusPort}`;
        await waitFor(
          async () => ((await fetch(`${prometheusApi}/-/ready`).catch(() => undefined))?.status === 200 ? true : undefined),
          30_000,
          `Prometheus ready (its log: ${log})`,
        );

        const { id } = await subscribe(t, 'Patient?family=Scraped', receiver.url);
        await untilStatus(t, id, 'active');
        for (let n = 0; n < 3; n++) expect((await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Scraped' }] })).statusCode).toBe(201);
        await receiver.waitForCalls(4);

        // What Prometheus stored, through its query API.
        const query = async (promql: string) => {
          const answer = (await (await fetch(`${prometheusApi}/api/v1/query?query=${encodeURIComponent(promql)}`)).json()) as {
            status: string;
            data: { result: { metric: Record<string, string>; value: [number, string] }[] };
          };
          expect(answer.status).toBe('success');
          return answer.data.result;
        };
        const delivered = await waitFor(
          async () => {
            const [series] = await query('fhir_webhooks_deliveries_total{kind="notification",outcome="delivered"}');
            return series !== undefined && Number(series.value[1]) === 3 ? series : undefined;
          },
          30_000,
          'Prometheus to scrape 3 deliveries',
        );
        expect(delivered.metric).toMatchObject({ job: 'fhir-webhooks', instance: `127.0.0.1:${servicePort}` });
        const [up] = await query('up{job="fhir-webhooks"}');
        expect(up?.value[1]).toBe('1');
        const [active] = await query('fhir_webhooks_subscriptions{status="active"}');
        expect(active?.value[1]).toBe('1');

        // Every query of the Grafana dashboard is valid PromQL over this data; the calls panel has data
        // (a rate needs two scrapes).
        await waitFor(
          async () => {
            const [scrapes] = await query('count_over_time(up{job="fhir-webhooks"}[1m])');
            return Number(scrapes?.value[1] ?? 0) >= 2 ? true : undefined;
          },
          30_000,
          'a second scrape',
        );
        const panels = dashboard.panels.map((panel) => ({ title: panel.title, expressions: panel.targets.map((target) => target.expr) }));
        for (const { title, expressions } of panels) {
          for (const expression of expressions) expect(await query(expression), `${title}: ${expression}`).toBeInstanceOf(Array);
        }
        const [calls] = panels.filter((panel) => panel.title.startsWith('Calls to subscribers'));
        expect((await query(calls!.expressions[0]!)).map((series) => series.metric)).toEqual(
          expect.arrayContaining([
            { kind: 'notification', outcome: 'delivered' },
            { kind: 'handshake', outcome: 'delivered' },
          ]),
        );

        // promtool's lint: the service's own metrics pass; of prom-client's process metrics, it
        // flags only three gauges named `…_total`, which that library names so.
        const exposition = (await app.inject({ method: 'GET', url: '/metrics' })).body;
        const own =
          exposition
            .split('\n')
            .filter((line) => line.includes('fhir_webhooks_'))
            .join('\n') + '\n';
        expect(promtool(['check', 'metrics'], own)).toEqual({ status: 0, output: '' });
        const all = promtool(['check', 'metrics'], exposition);
        expect(all.output.trim().split('\n').sort()).toEqual([
          'nodejs_active_handles_total non-counter metrics should not have "_total" suffix',
          'nodejs_active_requests_total non-counter metrics should not have "_total" suffix',
          'nodejs_active_resources_total non-counter metrics should not have "_total" suffix',
        ]);
      },
    );
  },
);
