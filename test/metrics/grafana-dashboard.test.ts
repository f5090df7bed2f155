import type { Dashboard } from '@grafana/schema';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.ts';
import dashboard from '../../monitoring/grafana/dashboards/fhir-webhooks.json' with { type: 'json' };

/**
 * The Grafana dashboard (monitoring/grafana/dashboards, provisioned by the
 * compose file's monitoring profile). Its shape is checked against Grafana's
 * own schema types (@grafana/schema) by the typecheck, below; its queries are
 * run against a real Prometheus in test/metrics/prometheus.test.ts.
 */
const typed: Dashboard = dashboard;

describe('the Grafana dashboard', () => {
  const expressions = (typed.panels ?? []).flatMap((panel) =>
    ('targets' in panel ? (panel.targets ?? []) : []).map((target) => (target as { expr?: string }).expr ?? ''),
  );

  it('has panels, each with a title, a place and queries on the Prometheus data source the provisioning names', () => {
    expect(typed.panels?.length).toBeGreaterThanOrEqual(8);
    for (const panel of typed.panels ?? []) {
      expect(panel.title).not.toBe('');
      expect(panel.gridPos).toBeDefined();
      expect(panel.datasource).toEqual({ type: 'prometheus', uid: 'prometheus' });
    }
    expect(expressions.every((expression) => expression !== '')).toBe(true);
  });

  it('queries only metrics the service exposes, and every fhir_webhooks_ metric it exposes is on a panel', async () => {
    const exposed = new Set((await createMetrics().registry.getMetricsAsJSON()).map((metric) => metric.name));
    // With the gauges read from the database (they are registered only with one).
    for (const name of [
      'fhir_webhooks_events',
      'fhir_webhooks_oldest_waiting_event_age_seconds',
      'fhir_webhooks_jobs',
      'fhir_webhooks_oldest_waiting_job_age_seconds',
      'fhir_webhooks_subscriptions',
      'fhir_webhooks_flapping_subscriptions',
      'fhir_webhooks_subscription_deactivations_last_day_max',
    ])
      exposed.add(name);
    const queried = new Set(
      expressions.flatMap((expression) =>
        [...expression.matchAll(/\b((?:fhir_webhooks|process|nodejs)_\w+)/g)].map((match) => match[1]!.replace(/_(bucket|count|sum)$/, '')),
      ),
    );
    expect([...queried].filter((name) => !exposed.has(name))).toEqual([]);
    expect([...exposed].filter((name) => name.startsWith('fhir_webhooks_') && !queried.has(name))).toEqual([]);
  });
});
