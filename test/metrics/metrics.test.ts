import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.ts';
import { startWorkers } from '../../src/dispatch/worker.ts';
import { startService } from '../../src/service.ts';
import { baseUrl, startTestApp, testSecretsKey, type TestApp } from '../support/app.ts';
import { createTestDatabase } from '../support/database.ts';
import { freePort, startReceiver, waitFor, type Receiver } from '../support/receiver.ts';
import { subscribe } from '../support/subscriptions.ts';

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** The samples of a Prometheus text exposition, by series (`name{label="value",…}`). */
function samples(text: string): Map<string, number> {
  const series = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    series.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return series;
}

/** An API serving /metrics and workers counting into the same registry, with a receiver; closed after the file. */
async function measuredStack(environment: Record<string, string>): Promise<{ t: TestApp; receiver: Receiver; stopWorkers: () => Promise<void> }> {
  const t = await startTestApp({ metrics: true });
  cleanups.push(() => t.close());
  const config = loadConfig({ BASE_URL: baseUrl, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true', DELIVERY_RETRY_DELAYS_MS: '50', ...environment });
  const workers = await startWorkers(config, t.database, testSecretsKey, pino({ level: 'silent' }), t.metrics);
  cleanups.push(() => workers.stop());
  const receiver = await startReceiver();
  cleanups.push(() => receiver.close());
  return { t, receiver, stopWorkers: () => workers.stop() };
}

describe('/metrics after real deliveries', () => {
  it(
    'counts calls by kind and outcome, their durations, commit-to-delivery latency, retries, deactivations, alert failures, and reads the queue and subscriptions from the database',
    { timeout: 60_000 },
    async () => {
      const { t, receiver } = await measuredStack({
        DELIVERY_MAX_FAILURES: '2',
        // Nothing listens there: the alert e-mail fails (and is retried).
        SMTP_URL: `smtp://127.0.0.1:${await freePort()}`,
      });
      const scrape = async () => {
        // No API key: a scraper has none.
        const response = await t.app.inject({ method: 'GET', url: '/metrics' });
        expect(response.statusCode).toBe(200);
        expect(response.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
        return samples(response.body);
      };

      const before = await scrape();
      expect(before.get('fhir_webhooks_deliveries_total{kind="notification",outcome="delivered"}')).toBe(0);
      expect(before.get('fhir_webhooks_subscriptions{status="active"}')).toBe(0);
      expect(before.has('process_cpu_user_seconds_total')).toBe(true);

      const { id } = await subscribe(t, 'Patient?family=Measured', receiver.url);
      const active = await waitFor(
        async () => ((await scrape()).get('fhir_webhooks_subscriptions{status="active"}') === 1 ? true : undefined),
        10_000,
        'the activation',
      );
      expect(active).toBe(true);
      await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Measured' }] });
      const delivered = await waitFor(
        async () => {
          const now = await scrape();
          // The latency is observed once the attempt is recorded, just after it is counted.
          return now.get('fhir_webhooks_deliveries_total{kind="notification",outcome="delivered"}') === 1 &&
            now.get('fhir_webhooks_commit_to_delivery_seconds_count') === 1
            ? now
            : undefined;
        },
        10_000,
        'the delivery counted',
      );
      expect(delivered.get('fhir_webhooks_deliveries_total{kind="handshake",outcome="delivered"}')).toBe(1);
      expect(delivered.get('fhir_webhooks_delivery_duration_seconds_count{kind="notification"}')).toBe(1);
      expect(delivered.get('fhir_webhooks_delivery_duration_seconds_count{kind="handshake"}')).toBe(1);
      expect(delivered.get('fhir_webhooks_commit_to_delivery_seconds_count')).toBe(1);
      // From the commit to the answer: more than nothing, less than the whole test.
      const latency = delivered.get('fhir_webhooks_commit_to_delivery_seconds_sum')!;
      expect(latency).toBeGreaterThan(0);
      expect(latency).toBeLessThan(10);

      // Two failed calls: a retry, then the deactivation, whose e-mail cannot be sent.
      receiver.answer = () => ({ status: 500 });
      await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Measured' }] });
      const failed = await waitFor(
        async () => {
          const now = await scrape();
          return (now.get('fhir_webhooks_alert_email_failures_total') ?? 0) >= 1 ? now : undefined;
        },
        20_000,
        'the alert failure counted',
      );
      expect(failed.get('fhir_webhooks_deliveries_total{kind="notification",outcome="retrying"}')).toBe(1);
      expect(failed.get('fhir_webhooks_deliveries_total{kind="notification",outcome="failed"}')).toBe(1);
      expect(failed.get('fhir_webhooks_retries_scheduled_total{kind="notification"}')).toBe(1);
      expect(failed.get('fhir_webhooks_deactivations_total')).toBe(1);
      expect(failed.get('fhir_webhooks_subscriptions{status="error"}')).toBe(1);
      expect(failed.get('fhir_webhooks_subscriptions{status="active"}')).toBe(0);
      // The alert job waits for graphile-worker's retry: the queue gauge reads it from the database.
      const alertJobs = [...failed].filter(([series]) => series.startsWith('fhir_webhooks_jobs{task="deactivation_alert"'));
      expect(alertJobs.reduce((sum, [, count]) => sum + count, 0)).toBe(1);
      // Deactivations as bounded series: one deactivation is not flapping. No series names a subscription:
      // /metrics is read without a key.
      expect((await t.app.inject({ method: 'GET', url: '/metrics' })).body).not.toContain(id);
      expect(failed.get('fhir_webhooks_flapping_subscriptions')).toBe(0);
      expect(failed.get('fhir_webhooks_subscription_deactivations_last_day_max')).toBe(1);
    },
  );
});

describe('/metrics with no jobs at all', () => {
  it('has a sample of 0 for each task and state, so that alerts on these series see 0, not nothing', async () => {
    const t = await startTestApp({ metrics: true });
    cleanups.push(() => t.close());
    expect((await t.database.pool.query('SELECT count(*)::int AS jobs FROM graphile_worker.jobs')).rows).toEqual([{ jobs: 0 }]);
    const scraped = samples((await t.app.inject({ method: 'GET', url: '/metrics' })).body);
    const tasks = [
      'subscription_handshake',
      'subscription_reactivation',
      'subscription_reactivation_request',
      'notification_delivery',
      'deactivation_alert',
      'delivery_log_cleanup',
    ];
    for (const task of tasks) {
      for (const state of ['waiting', 'scheduled', 'running'])
        expect(scraped.get(`fhir_webhooks_jobs{task="${task}",state="${state}"}`), `${task} ${state}`).toBe(0);
      expect(scraped.get(`fhir_webhooks_oldest_waiting_job_age_seconds{task="${task}"}`), task).toBe(0);
    }
    expect([...scraped.keys()].filter((series) => series.startsWith('fhir_webhooks_jobs{'))).toHaveLength(tasks.length * 3);

    // One job: its own sample counts it, the others stay 0.
    await t.database.pool.query(`SELECT graphile_worker.add_job('deactivation_alert', '{"alertId": "1"}'::json)`);
    const oneJob = samples((await t.app.inject({ method: 'GET', url: '/metrics' })).body);
    expect(oneJob.get('fhir_webhooks_jobs{task="deactivation_alert",state="waiting"}')).toBe(1);
    expect(oneJob.get('fhir_webhooks_jobs{task="deactivation_alert",state="running"}')).toBe(0);
    expect(oneJob.get('fhir_webhooks_oldest_waiting_job_age_seconds{task="deactivation_alert"}')).toBeGreaterThanOrEqual(0);
    expect(oneJob.get('fhir_webhooks_oldest_waiting_job_age_seconds{task="subscription_handshake"}')).toBe(0);
  });
});

describe('/metrics while no worker runs', () => {
  it('reads the waiting event and its age from the database', { timeout: 30_000 }, async () => {
    const { t, receiver, stopWorkers } = await measuredStack({});
    const scrape = async () => samples((await t.app.inject({ method: 'GET', url: '/metrics' })).body);
    await subscribe(t, 'Patient?family=Waiting', receiver.url);
    await waitFor(async () => ((await scrape()).get('fhir_webhooks_subscriptions{status="active"}') === 1 ? true : undefined), 10_000, 'the activation');
    expect((await scrape()).get('fhir_webhooks_events{state="waiting"}')).toBe(0);
    expect((await scrape()).get('fhir_webhooks_oldest_waiting_event_age_seconds')).toBe(0);
    await stopWorkers();
    await t.fhir('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Waiting' }] });
    const waiting = await waitFor(
      async () => {
        const now = await scrape();
        return (now.get('fhir_webhooks_oldest_waiting_event_age_seconds') ?? 0) > 0.2 ? now : undefined;
      },
      10_000,
      'the event waiting',
    );
    expect(waiting.get('fhir_webhooks_events{state="waiting"}')).toBe(1);
    expect(waiting.get('fhir_webhooks_events{state="sending"}')).toBe(0);
    expect(waiting.get('fhir_webhooks_events{state="scheduled"}')).toBe(0);
    expect(waiting.get('fhir_webhooks_oldest_waiting_event_age_seconds')).toBeLessThan(10);
    // The handshake only.
    expect(receiver.calls).toHaveLength(1);
  });
});

describe('/metrics when the OAuth token endpoint fails', () => {
  it('counts the failed token requests; the subscriber is never called', { timeout: 30_000 }, async () => {
    const { t, receiver } = await measuredStack({
      OAUTH_TOKEN_URL: `http://127.0.0.1:${await freePort()}/token`,
      OAUTH_CLIENT_ID: 'webhooks',
      OAUTH_CLIENT_SECRET: 'secret',
    });
    await subscribe(t, 'Patient?family=Tokenless', receiver.url);
    const scraped = await waitFor(
      async () => {
        const now = samples((await t.app.inject({ method: 'GET', url: '/metrics' })).body);
        // The token failure is counted as it happens; the failed attempt once it is recorded, just after.
        const counted =
          (now.get('fhir_webhooks_oauth_token_failures_total') ?? 0) >= 1 &&
          (now.get('fhir_webhooks_deliveries_total{kind="handshake",outcome="retrying"}') ?? 0) >= 1;
        return counted ? now : undefined;
      },
      10_000,
      'the token failure and the failed attempt counted',
    );
    expect(scraped.get('fhir_webhooks_deliveries_total{kind="handshake",outcome="delivered"}')).toBe(0);
    expect(receiver.calls).toEqual([]);
  });
});

describe('METRICS_PORT', () => {
  it('serves /metrics on a port of its own, and not on the API port', async () => {
    const database = await createTestDatabase();
    cleanups.push(() => database.drop());
    const metricsPort = await freePort();
    const config = loadConfig({
      DATABASE_URL: database.url,
      PORT: '0',
      METRICS_PORT: String(metricsPort),
      BOOTSTRAP_API_KEY: 'bootstrap-key-0123456789',
      SECRETS_ENCRYPTION_KEY: testSecretsKey.toString('base64'),
    });
    const service = await startService(config, pino({ level: 'silent' }), { api: true, workers: false });
    try {
      const own = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
      expect(own.status).toBe(200);
      expect(samples(await own.text()).get('fhir_webhooks_subscriptions{status="active"}')).toBe(0);
      expect((await fetch(`http://127.0.0.1:${metricsPort}/other`)).status).toBe(404);
      expect((await fetch(`${service.address}/metrics`)).status).toBe(404);
    } finally {
      await service.close();
    }
  });
});
