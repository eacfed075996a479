// The PromQL of ops/: every expression of the Grafana dashboard and the alert rules, and the metric
// names each selects (Prometheus' own grammar, @prometheus-io/lezer-promql). Shared by the
// dashboard's unit test and the observability e2e, which checks the SDK metrics it charts on a
// real worker's page.
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { parser } from '@prometheus-io/lezer-promql';

const ROOT = path.resolve(__dirname, '../..');

/** Metric names an expression selects, from its syntax tree; throws on a syntax error. */
export function metricNames(expr: string): string[] {
  // Grafana's variables: an interval, and template values inside label matchers.
  const src = expr.replace(/\$__(rate_)?interval/g, '5m').replace(/\$\{?(\w+)\}?/g, '$1');
  const tree = parser.parse(src);
  const names: string[] = [];
  const c = tree.cursor();
  do {
    if (c.type.isError) throw new Error(`PromQL syntax error at ${c.from} in ${JSON.stringify(expr)}`);
    if (c.type.name === 'Identifier' && c.node.parent?.type.name === 'VectorSelector') names.push(src.slice(c.from, c.to));
  } while (c.next());
  return names;
}

export function dashboardExprs(): { where: string; expr: string }[] {
  const d = JSON.parse(fs.readFileSync(path.join(ROOT, 'ops/grafana/shardctl.json'), 'utf8'));
  const out: { where: string; expr: string }[] = [];
  const walk = (panels: any[]) => {
    for (const p of panels ?? []) {
      for (const t of p.targets ?? []) out.push({ where: `panel "${p.title}" ${t.refId}`, expr: t.expr });
      walk(p.panels);
    }
  };
  walk(d.panels);
  for (const v of d.templating?.list ?? []) {
    const q = typeof v.query === 'string' ? v.query : v.query?.query;
    const m = /^label_values\(([^,]+),/.exec(q ?? '');
    if (m) out.push({ where: `variable ${v.name}`, expr: m[1].trim() });
  }
  return out;
}

export function alertExprs(): { where: string; expr: string }[] {
  const doc = YAML.parse(fs.readFileSync(path.join(ROOT, 'ops/prometheus/alerts.yml'), 'utf8'));
  return doc.groups.flatMap((g: any) => g.rules.map((r: any) => ({ where: `alert ${r.alert ?? r.record}`, expr: String(r.expr) })));
}

/** The Temporal SDK's metric names the dashboard selects (`temporal_*`, histograms as their _bucket). */
export function dashboardSdkMetrics(): string[] {
  return [...new Set(dashboardExprs().flatMap(({ expr }) => metricNames(expr).filter((n) => n.startsWith('temporal_'))))].sort();
}

/** Series names of a Prometheus exposition's `# TYPE` lines: histograms as _bucket, _sum and _count. */
export function seriesOfTypes(text: string): Set<string> {
  const out = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    out.add(m[1]);
    if (m[2] === 'histogram' || m[2] === 'summary') for (const s of ['_bucket', '_sum', '_count']) out.add(m[1] + s);
  }
  return out;
}

/**
 * A dashboard expression as plain PromQL for promtool: Grafana's interval variables as 5m, a
 * template variable (used inside a label matcher's regex) as `.*`.
 */
export function dashboardPromql(expr: string): string {
  return expr.replace(/\$__(rate_)?interval|\$__range/g, '5m').replace(/\$\{?(\w+)\}?/g, '.*');
}

/** Every dashboard expression as a recording rule, so `promtool check rules` parses and type-checks each. */
export function dashboardAsRules(extra: string[] = []): { yaml: string; count: number } {
  const exprs = [...dashboardExprs().map((e) => dashboardPromql(e.expr)), ...extra];
  const rules = exprs.map((expr, i) => ({ record: `shardctl_dashboard:query_${i}`, expr }));
  return { yaml: YAML.stringify({ groups: [{ name: 'shardctl-dashboard', rules }] }), count: rules.length };
}
