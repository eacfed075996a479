// The worker's operator surfaces on a real move through the real `shardctl worker` process: its
// Prometheus endpoint (scraped during the move: moves by phase, rows copied rising, cutover
// attempts and pause histogram, the per-move series gone once the move is done) and its JSON log
// (every activity line names move, unit, phase, activity and attempt; no DSN password, no S3 secret),
// and every Temporal SDK metric the Grafana dashboard charts on that page.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { testConfig, uniq, closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import { spawnCollecting, newMark, killMarked, MARK_VAR, type Spawned } from '../helpers/procs';
import { moveWorkflowId, replicationNames } from '../../lib/ids';
import { dashboardSdkMetrics, seriesOfTypes } from '../helpers/ops-exprs';

const ROOT = path.resolve(__dirname, '../..');
const SDK_FIXTURE = seriesOfTypes(fs.readFileSync(path.join(ROOT, 'test/fixtures/temporal-sdk-metrics.txt'), 'utf8'));
const mark = newMark('obs');
let t: Awaited<ReturnType<typeof H.temporal>>;
let worker: Spawned;
let metricsUrl = '';
const tq = uniq('obs');

/** `name{labels} value` samples of a Prometheus text page. */
function samples(text: string, name: string, labels: Record<string, string> = {}): number[] {
  const out: number[] = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[3] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) out.push(Number(m[4]));
  }
  return out;
}
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

async function scrape(): Promise<string> {
  const r = await fetch(metricsUrl);
  expect(r.status).toBe(200);
  expect(r.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return r.text();
}

beforeAll(async () => {
  await H.prepareStack();
  t = await H.temporal();
  worker = spawnCollecting(process.execPath, [path.join(ROOT, 'cli/shardctl.js'), 'worker', '--task-queue', tq, '--metrics-addr', '127.0.0.1:0'], {
    cwd: ROOT,
    env: { ...process.env, [MARK_VAR]: mark, SHARDCTL_LOG_LEVEL: 'debug' },
  });
  // The JSON line itself (stdout), not only the stderr banner: under load the two arrive in either order.
  await worker.waitFor('"msg":"worker polling"', 120_000);
  const started = worker
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l))
    .find((l) => l.msg === 'worker polling');
  metricsUrl = started.metrics;
  expect(metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
}, 180_000);

afterAll(async () => {
  await t?.close();
  await killMarked(mark);
  await closePools();
});

describe('worker metrics and logs on a real move', () => {
  it('the metrics change as the move runs, and the log carries the move on every activity line and no secret', { timeout: 240_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'obs');
    await H.seed(tenant, 3000, 2);
    const before = await scrape();
    const copiedBefore = sum(samples(before, 'shardctl_rows_copied_total', { source: 'shard-a', target: 'shard-b' }));
    const bytesBefore = sum(samples(before, 'shardctl_copy_bytes_total', { source: 'shard-a', target: 'shard-b' }));

    // Throttled so the copy lasts seconds: two scrapes inside it see rows copied rise.
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { rowsPerSecond: 300, copyBatchRows: 100, soakSeconds: 2 }));
    const copying = await H.waitFor(h, (s) => s.phase === 'copy' && s.tables.some((x) => !x.done), 60_000);
    const slot = replicationNames(copying.moveId, 'forward').slot;
    await new Promise((r) => setTimeout(r, 1500));
    const during1 = await scrape();
    await new Promise((r) => setTimeout(r, 2000));
    const during2 = await scrape();
    const rows1 = sum(samples(during1, 'shardctl_move_table_rows_copied', { unit: tenant }));
    const rows2 = sum(samples(during2, 'shardctl_move_table_rows_copied', { unit: tenant }));
    expect(rows1).toBeGreaterThan(0);
    expect(rows2).toBeGreaterThan(rows1);
    // Moves by phase come from Temporal visibility, counted at most every 5 s.
    let inCopy = 0;
    for (const deadline = Date.now() + 8000; inCopy < 1 && Date.now() < deadline; await new Promise((r) => setTimeout(r, 500))) {
      const page = await scrape();
      expect(samples(page, 'shardctl_moves_visibility_up')).toEqual([1]);
      inCopy = samples(page, 'shardctl_moves', { phase: 'copy' })[0];
    }
    expect(inCopy).toBeGreaterThanOrEqual(1);
    // The move's slot holds WAL from the copy on: the page shows it, whatever phase the move is in,
    // read from the shards with moves by phase, at most every 5 s, not by a catch-up round (its
    // value against pg_replication_slots: test/integration/slot-lag-metrics.test.ts).
    let retained: number[] = [];
    for (const deadline = Date.now() + 8000; retained.length === 0 && Date.now() < deadline; await new Promise((r) => setTimeout(r, 500))) {
      retained = samples(await scrape(), 'shardctl_slot_retained_wal_bytes', { shard: 'shard-a', slot });
    }
    expect(retained).toEqual([expect.any(Number)]);
    expect(retained[0]).toBeGreaterThan(0);
    expect(samples(during1, 'shardctl_worker_process_resident_memory_bytes')[0]).toBeGreaterThan(0);
    // The Temporal SDK's own runtime metrics (its Prometheus exporter) on the same page: the
    // worker's polls and requests to the server.
    expect(during1).toMatch(/^temporal_request_total\{/m);
    expect(during1).toMatch(/^temporal_worker_task_slots_available\{/m);
    expect(during1).not.toContain('temporal sdk metrics unavailable');

    const done = await H.waitPhase(h, 'done', 180_000);
    const after = await scrape();
    fs.mkdirSync(path.join(ROOT, 'test-results'), { recursive: true });
    fs.writeFileSync(path.join(ROOT, 'test-results', 'observability-metrics.txt'), after);
    // Every Temporal SDK metric the Grafana dashboard charts is on this real page, with samples
    // (test/fixtures/temporal-sdk-metrics.txt, which the dashboard's unit test reads, is a copy of its names).
    const charted = dashboardSdkMetrics();
    expect(charted.length).toBeGreaterThan(10);
    expect(charted.filter((n) => !new RegExp(`^${n}[{ ]`, 'm').test(after))).toEqual([]);
    expect(charted.filter((n) => !SDK_FIXTURE.has(n))).toEqual([]);
    expect(sum(samples(after, 'shardctl_rows_copied_total', { source: 'shard-a', target: 'shard-b' })) - copiedBefore).toBeGreaterThanOrEqual(3000);
    // The copy's bytes on the worker's own endpoint (exact counting: test/integration/copy-bytes-metric.test.ts).
    expect(sum(samples(after, 'shardctl_copy_bytes_total', { source: 'shard-a', target: 'shard-b' })) - bytesBefore).toBeGreaterThan(3000);
    expect(samples(after, 'shardctl_cutover_attempts_total', { direction: 'forward' })[0]).toBeGreaterThanOrEqual(done.cutoverAttempts);
    expect(samples(after, 'shardctl_cutover_pause_ms_count', { direction: 'forward', outcome: 'switched' })[0]).toBeGreaterThanOrEqual(1);
    expect(samples(after, 'shardctl_cutover_pause_ms_sum', { direction: 'forward', outcome: 'switched' })[0]).toBeGreaterThan(0);
    expect(samples(after, 'shardctl_activity_duration_seconds_count', { activity: 'copyTable', outcome: 'ok' })[0]).toBeGreaterThanOrEqual(1);
    expect(samples(after, 'shardctl_rows_applied_total', { direction: 'reverse' }).length).toBe(1);
    // The move is over: its per-move series are gone (cardinality stays bounded by live moves).
    expect(samples(after, 'shardctl_move_lag_bytes', { unit: tenant })).toEqual([]);
    expect(samples(after, 'shardctl_move_table_rows_copied', { unit: tenant })).toEqual([]);
    expect(samples(after, 'shardctl_slot_retained_wal_bytes', { slot })).toEqual([]);

    worker.proc.kill('SIGTERM');
    await worker.exited;
    const out = worker.output();
    fs.mkdirSync(path.join(ROOT, 'test-results'), { recursive: true });
    fs.writeFileSync(path.join(ROOT, 'test-results', 'observability-worker.log'), out);

    // Secrets: the DSNs' password and the S3 secret never appear, though the DSNs' hosts do.
    const config = testConfig();
    const password = new URL(config.shards[0].dsn).password;
    expect(password.length).toBeGreaterThan(0);
    expect(out).not.toContain(password);
    expect(out).not.toContain(config.s3.secretAccessKey);
    expect(out).toContain(new URL(config.shards[1].dsn).host);

    const lines = out.split('\n').filter((l) => l.trim());
    const json = lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
    // The one human line on stderr is the start banner; everything else is JSON.
    expect(lines.filter((l) => !l.startsWith('{'))).toEqual([expect.stringMatching(/^worker: polling /)]);
    const moveId = done.moveId;
    const ours = json.filter((l) => l.workflowId === moveWorkflowId(tenant) || l.unit === tenant);
    const activityLines = ours.filter((l) => typeof l.activity === 'string');
    expect(new Set(activityLines.map((l) => l.activity))).toEqual(
      new Set([
        'planMove',
        'reserveHeadroom',
        'recordMoveEvent',
        'setupReplication',
        'copyTable',
        'copyBlobs',
        'catchUp',
        'validateMove',
        'cutover',
        'dropReplication',
        'retireSource',
      ]),
    );
    for (const l of activityLines) {
      expect(l, JSON.stringify(l)).toMatchObject({ unit: tenant, attempt: expect.any(Number), phase: expect.any(String), level: expect.any(String) });
      if (l.activity !== 'planMove') expect(l.moveId, JSON.stringify(l)).toBe(moveId);
    }
    expect(activityLines.some((l) => l.msg === 'copy batch committed' && l.activity === 'copyTable' && l.phase === 'copy')).toBe(true);
    expect(activityLines.some((l) => l.msg === 'cutover switched' && l.phase === 'fence' && l.pauseMs >= 0)).toBe(true);
    // In order of first entry (an aborted cutover returns to catch-up and comes back).
    const phases = [...new Set(ours.filter((l) => l.msg === 'move phase').map((l) => l.phase))];
    expect(phases).toEqual(['copy', 'catchup', 'validate', 'fence', 'switch', 'soak', 'retire', 'done']);
  });
});
