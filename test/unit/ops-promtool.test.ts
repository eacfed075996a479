// Prometheus' own promtool on ops/: `promtool check rules` parses and type-checks every alert rule
// and every Grafana panel query (as recording rules) with Prometheus' real PromQL engine, which
// catches what the grammar check of ops-dashboards.test.ts cannot (a function given the wrong type
// of argument); `promtool test rules` runs ops/prometheus/alerts.test.yml: each alert fires on the
// series that should raise it. Each check is shown to fail on a broken copy. promtool comes from
// Debian's prometheus package, extracted by scripts/ensure-deps.sh; without one this file skips, saying so.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { alertExprs, dashboardAsRules, metricNames } from '../helpers/ops-exprs';

const ROOT = path.resolve(__dirname, '../..');
const RULES = path.join(ROOT, 'ops/prometheus/alerts.yml');
const RULE_TESTS = path.join(ROOT, 'ops/prometheus/alerts.test.yml');

/** SHARDCTL_PROMTOOL (must exist when set), else the one ensure-deps extracted, else `promtool` on PATH. */
function findPromtool(): string | undefined {
  const own = process.env.SHARDCTL_PROMTOOL;
  if (own) {
    if (!fs.existsSync(own)) throw new Error(`SHARDCTL_PROMTOOL=${own} does not exist`);
    return own;
  }
  const extracted = path.join(ROOT, '.dev/tools/promtool/promtool');
  if (fs.existsSync(extracted)) return extracted;
  const r = spawnSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' });
  return r.status === 0 && r.stdout.trim() ? r.stdout.trim() : undefined;
}
const promtool = findPromtool();
const NO_PROMTOOL =
  "no promtool found (SHARDCTL_PROMTOOL, .dev/tools/promtool/promtool, `promtool` on PATH): `npm test` extracts it from Debian's prometheus package (scripts/ensure-deps.sh: apt-get download prometheus, dpkg-deb -x); or set SHARDCTL_PROMTOOL";
if (!promtool) console.warn(`promtool tests skipped: ${NO_PROMTOOL}`);

function run(...args: string[]): { code: number | null; out: string } {
  const r = spawnSync(promtool!, args, { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
}

let tmp: string;
beforeAll(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'shardctl-promtool-'));
});
afterAll(() => {
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

/** A copy of the rules and their tests in a directory of their own, the rules with `from` replaced by `to`. */
function brokenCopy(from: string, to: string): { rules: string; tests: string } {
  const dir = fs.mkdtempSync(path.join(tmp, 'broken-'));
  const text = fs.readFileSync(RULES, 'utf8');
  expect(text.split(from).length - 1, from).toBe(1);
  fs.writeFileSync(path.join(dir, 'alerts.yml'), text.replace(from, to));
  fs.copyFileSync(RULE_TESTS, path.join(dir, 'alerts.test.yml'));
  return { rules: path.join(dir, 'alerts.yml'), tests: path.join(dir, 'alerts.test.yml') };
}

describe.skipIf(!promtool)(`promtool on ops/${promtool ? '' : ` (skipped: ${NO_PROMTOOL})`}`, () => {
  it('promtool check rules accepts every alert rule, and refuses a rule whose function gets the wrong type of argument (the check can fail)', () => {
    const ok = run('check', 'rules', RULES);
    expect(ok.code, ok.out).toBe(0);
    expect(ok.out).toContain(`SUCCESS: ${alertExprs().length} rules found`);

    // increase() needs a range vector: valid grammar (the lezer check passes it), refused by Prometheus.
    const from = 'increase(shardctl_cutover_aborts_total[1h])';
    expect(() => metricNames('increase(shardctl_cutover_aborts_total)')).not.toThrow();
    const bad = run('check', 'rules', brokenCopy(from, 'increase(shardctl_cutover_aborts_total)').rules);
    expect(bad.code, bad.out).not.toBe(0);
    expect(bad.out).toMatch(/expected type range vector/);
  });

  it('promtool test rules: each alert fires on the series of ops/prometheus/alerts.test.yml, and a rule that no longer fires fails it', () => {
    const ok = run('test', 'rules', RULE_TESTS);
    expect(ok.code, ok.out).toBe(0);
    expect(ok.out).toContain('SUCCESS');

    // The slot threshold raised a thousandfold: the rule is still valid, the alert no longer fires.
    const weakened = brokenCopy('> 0.8 * 50 * 1024^3', '> 0.8 * 50 * 1024^4');
    expect(run('check', 'rules', weakened.rules).code).toBe(0);
    const bad = run('test', 'rules', weakened.tests);
    expect(bad.code, bad.out).not.toBe(0);
    expect(bad.out).toContain('alertname: ShardctlSlotRetentionHigh');
  });

  it('promtool check rules accepts every Grafana panel and variable query, and refuses one histogram_quantile given a range vector (the check can fail)', () => {
    const { yaml, count } = dashboardAsRules();
    expect(count).toBeGreaterThan(20);
    const file = path.join(tmp, 'dashboard-rules.yml');
    fs.writeFileSync(file, yaml);
    const ok = run('check', 'rules', file);
    expect(ok.code, ok.out).toBe(0);
    expect(ok.out).toContain(`SUCCESS: ${count} rules found`);

    const broken = dashboardAsRules(['histogram_quantile(0.99, shardctl_cutover_pause_ms_bucket[5m])']);
    const badFile = path.join(tmp, 'dashboard-rules-broken.yml');
    fs.writeFileSync(badFile, broken.yaml);
    const bad = run('check', 'rules', badFile);
    expect(bad.code, bad.out).not.toBe(0);
    expect(bad.out).toMatch(/expected type instant vector/);
  });
});
