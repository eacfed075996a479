// The Grafana dashboard (ops/grafana/shardctl.json) and the alert rules (ops/prometheus/alerts.yml)
// cannot drift from the code: every expression parses with Prometheus' own PromQL grammar
// (@prometheus-io/lezer-promql), every metric it names is one the code registers (the worker's
// registry and the router's, imported, not listed by hand), and every shardctl metric the code
// registers has a panel. The Temporal SDK's runtime metrics it charts are checked against a real
// worker's page: test/fixtures/temporal-sdk-metrics.txt here, the live scrape in
// test/e2e/observability.test.ts.
import { describe, it, expect } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { Registry } from 'prom-client';
import { createMetrics } from '../../lib/obs/metrics';
import { registerRouterMetrics } from '../../lib/obs/router-metrics';
import { alertExprs, dashboardExprs, dashboardSdkMetrics, metricNames, seriesOfTypes } from '../helpers/ops-exprs';

const ROOT = path.resolve(__dirname, '../..');
/** Prometheus' own series (not ours): the scrape's `up`. */
const PROMETHEUS_OWN = new Set(['up']);
/** The Temporal SDK's series, as a real worker's /metrics showed them (HELP and TYPE lines kept). */
const SDK_SERIES = seriesOfTypes(fs.readFileSync(path.join(ROOT, 'test/fixtures/temporal-sdk-metrics.txt'), 'utf8'));

/** Every series name the code exposes: histograms as their _bucket, _sum and _count. */
async function registeredSeries(): Promise<{ series: Set<string>; families: string[] }> {
  const worker = createMetrics({ processMetrics: true });
  const routers = new Registry();
  registerRouterMetrics(routers, {
    metrics: () =>
      ({
        transactions: 0,
        staleRetries: 0,
        frozenWaits: 0,
        serializationRetries: 0,
        refreshFailures: 0,
        snapshotAgeMs: 0,
        directoryReachable: true,
        generation: 0,
      }) as any,
  });
  const series = new Set<string>();
  const families: string[] = [];
  for (const m of [...(await worker.registry.getMetricsAsJSON()), ...(await routers.getMetricsAsJSON())]) {
    families.push(m.name);
    if (String(m.type) === 'histogram' || String(m.type) === 'summary') for (const s of ['_bucket', '_sum', '_count']) series.add(m.name + s);
    series.add(m.name);
  }
  return { series, families };
}

describe('ops/: the Grafana dashboard and the alert rules name only metrics the code registers', () => {
  it('finds the metrics an expression selects, and refuses a broken one (the check can fail)', () => {
    expect(metricNames('histogram_quantile(0.99, sum by (le) (rate(shardctl_cutover_pause_ms_bucket{outcome="switched"}[$__rate_interval])))')).toEqual([
      'shardctl_cutover_pause_ms_bucket',
    ]);
    expect(metricNames('max by (unit) (shardctl_move_lag_bytes{unit=~"$unit"}) > 0 and on() absent(up)')).toEqual(['shardctl_move_lag_bytes', 'up']);
    expect(() => metricNames('sum(rate(shardctl_rows_copied_total[5m])')).toThrow(/syntax error/);
  });

  it('every dashboard panel and template variable parses and names registered series only', async () => {
    const { series } = await registeredSeries();
    const exprs = dashboardExprs();
    expect(exprs.length).toBeGreaterThan(20);
    const unknown = exprs.flatMap(({ where, expr }) =>
      metricNames(expr)
        .filter((n) => !series.has(n) && !PROMETHEUS_OWN.has(n) && !SDK_SERIES.has(n))
        .map((n) => `${where}: ${n}`),
    );
    expect(unknown).toEqual([]);
  });

  it("charts the Temporal SDK's runtime metrics a real worker exports: task slots, pollers, poll, schedule-to-start and activity latencies", () => {
    expect(SDK_SERIES.size).toBeGreaterThan(20);
    const charted = dashboardSdkMetrics();
    // Each a name the SDK's exporter really wrote (a misspelt or invented one fails here).
    expect(charted.filter((n) => !SDK_SERIES.has(n))).toEqual([]);
    for (const n of [
      'temporal_worker_task_slots_used',
      'temporal_worker_task_slots_available',
      'temporal_num_pollers',
      'temporal_long_request_latency_bucket',
      'temporal_activity_schedule_to_start_latency_bucket',
      'temporal_workflow_task_schedule_to_start_latency_bucket',
      'temporal_activity_execution_latency_bucket',
      'temporal_request_total',
    ])
      expect(charted).toContain(n);
    // The check can fail: a name the exporter does not write is caught.
    expect(SDK_SERIES.has('temporal_activity_execution_latency_seconds_bucket')).toBe(false);
  });

  it('every alert rule parses, names registered series only, and the three of issue 12 are there', async () => {
    const { series } = await registeredSeries();
    const exprs = alertExprs();
    const unknown = exprs.flatMap(({ where, expr }) =>
      metricNames(expr)
        .filter((n) => !series.has(n) && !PROMETHEUS_OWN.has(n))
        .map((n) => `${where}: ${n}`),
    );
    expect(unknown).toEqual([]);
    const doc = YAML.parse(fs.readFileSync(path.join(ROOT, 'ops/prometheus/alerts.yml'), 'utf8'));
    const rules = doc.groups.flatMap((g: any) => g.rules);
    for (const r of rules) {
      expect(
        Object.keys(r).every((k) => ['alert', 'expr', 'for', 'labels', 'annotations'].includes(k)),
        r.alert,
      ).toBe(true);
      expect(r.labels?.severity, r.alert).toMatch(/^(warning|critical)$/);
      if (r.for !== undefined) expect(r.for, r.alert).toMatch(/^\d+[smhd]$/);
    }
    const byName = new Map(rules.map((r: any) => [r.alert, r]));
    expect([...new Set(metricNames((byName.get('ShardctlSlotRetentionHigh') as any).expr))].sort()).toEqual([
      'shardctl_slot_retained_wal_bytes',
      'shardctl_slot_wal_keep_limit_bytes',
    ]);
    expect(metricNames((byName.get('ShardctlMoveBlocked') as any).expr)).toEqual(['shardctl_moves_blocked']);
    expect(metricNames((byName.get('ShardctlCutoverAbortLoop') as any).expr)).toEqual(['shardctl_cutover_aborts_total']);
  });

  it('every shardctl metric the worker and the router register has a dashboard panel', async () => {
    const { families } = await registeredSeries();
    const used = new Set(dashboardExprs().flatMap(({ expr }) => metricNames(expr).map((n) => n.replace(/_(bucket|sum|count)$/, ''))));
    const ours = families.filter((f) => f.startsWith('shardctl_') && !f.startsWith('shardctl_worker_'));
    expect(ours.filter((f) => !used.has(f))).toEqual([]);
  });
});
