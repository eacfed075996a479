// The worker's gauges of a move's change stream, on the real stack: shardctl_slot_retained_wal_bytes
// (read at scrape time, worker/slots-gauge.ts) equals what pg_replication_slots says the move's
// slot holds back while nothing consumes it, and leaves the page once the slot is dropped;
// shardctl_move_lag_seconds after a catch-up round with a backlog is the round's positive apply
// time, within the wall-clock time the round took, shardctl_rows_applied_total took the rows it
// applied, and shardctl_move_lag_bytes is its answer. Activities are built in-process with a worker's
// metrics registry (as in copy-bytes-metric.test.ts).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { testConfig, shardPool, closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import { createDeps, type Deps } from '../../activities/deps';
import { createActivities, type Activities } from '../../activities';
import { createMetrics, type Metrics } from '../../lib/obs/metrics';
import { replicationNames } from '../../lib/ids';
import { slotRetentionRefresher } from '../../worker/slots-gauge';
import { inTransaction } from '../../lib/pg';

const SOURCE = 'shard-a';
const TARGET = 'shard-b';
let metrics: Metrics;
let deps: Deps;
let act: Activities;
let ref: { moveId: string; unit: string; source: string; target: string };
let slot: string;

beforeAll(async () => {
  await H.prepareStack();
  metrics = createMetrics({ processMetrics: false });
  deps = createDeps(testConfig(), { metrics });
  act = createActivities(deps);
  const tenant = await H.newTenant(SOURCE, 'slm');
  await H.seed(tenant, 200, 0);
  const plan = await act.planMove({ unit: tenant, target: TARGET });
  expect(plan.ok, plan.reasons.join('; ')).toBe(true);
  ref = { moveId: plan.moveId, unit: tenant, source: plan.source, target: TARGET };
  slot = replicationNames(ref.moveId, 'forward').slot;
  await act.setupReplication({ ...ref, direction: 'forward' });
  for (const t of plan.tables) await act.copyTable({ ...ref, table: t.table, batchRows: 5000, rowsPerSecond: 0 });
}, 120_000);

afterAll(async () => {
  if (ref) await H.dropReplications(act, [ref]);
  await deps?.close();
  await closePools();
});

/** Writes `rows` events of the tenant on the source, through its fence (epoch 1), in one transaction. */
async function writeOnSource(rows: number): Promise<void> {
  await inTransaction(shardPool(SOURCE), async (c) => {
    await c.query(`select set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', '1', true)`, [ref.unit]);
    await c.query(`insert into public.events(tenant_id, kind) select $1, 'wal-' || g from generate_series(1, $2::int) g`, [ref.unit, rows]);
  });
}

/** What pg_replication_slots says the slot holds back on the source now. */
async function retainedNow(): Promise<number> {
  const r = await shardPool(SOURCE).query(
    `select pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::text as retained from pg_replication_slots where slot_name = $1`,
    [slot],
  );
  return Number(r.rows[0].retained);
}

async function series(metric: { get(): Promise<{ values: { labels: object; value: number }[] }> }, labels: Record<string, string>) {
  return (await metric.get()).values.filter((x) => Object.entries(labels).every(([k, want]) => (x.labels as Record<string, unknown>)[k] === want));
}

describe('slot and lag metrics', () => {
  it('the slot WAL retained gauge equals what pg_replication_slots reports for a slot nobody consumes', { timeout: 60_000 }, async () => {
    await writeOnSource(3000);
    const refresher = slotRetentionRefresher(testConfig(), (s) => deps.shardPool(s), metrics, { cacheMs: 0 });
    // WAL only grows between the two readings and the idle slot's restart_lsn does not move: the gauge lies between them.
    const before = await retainedNow();
    await refresher.refresh();
    const after = await retainedNow();
    const [s] = await series(metrics.slotRetainedBytes.gauge, { shard: SOURCE, slot });
    expect(before).toBeGreaterThan(100_000); // 3000 rows of WAL since the copy began
    expect(s.value).toBeGreaterThanOrEqual(before);
    expect(s.value).toBeLessThanOrEqual(after);
    // Beside it, the limit the retention alert compares against: the shard's own max_slot_wal_keep_size.
    const limit = await shardPool(SOURCE).query(`select pg_size_bytes(current_setting('max_slot_wal_keep_size'))::text as b`);
    const [l] = await series(metrics.slotWalKeepLimitBytes.gauge, { shard: SOURCE });
    expect(l.value).toBe(Number(limit.rows[0].b));
    expect(l.value).toBeGreaterThan(0);
  });

  it('the lag seconds of a catch-up round with a backlog are its positive apply time, within the round', { timeout: 60_000 }, async () => {
    await writeOnSource(2000);
    const appliedBefore = (await series(metrics.rowsApplied, { direction: 'forward' }))[0]?.value ?? 0;
    const t0 = Date.now();
    const r = await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
    const wallMs = Date.now() - t0;
    expect(r.transactionsApplied).toBeGreaterThan(0);
    const [s] = await series(metrics.lagSeconds.gauge, { unit: ref.unit, move_id: ref.moveId, direction: 'forward' });
    expect(s.value).toBe(r.lagMs / 1000);
    expect(s.value).toBeGreaterThan(0);
    expect(s.value).toBeLessThanOrEqual(wallMs / 1000);
    // The apply rate's counter took the rows the round applied, the 2000 written above among them.
    const [applied] = await series(metrics.rowsApplied, { direction: 'forward' });
    expect(applied.value - appliedBefore).toBeGreaterThanOrEqual(2000);
    // The lag in bytes is the round's own answer: what the source wrote that the target has not applied.
    const [bytes] = await series(metrics.lagBytes.gauge, { unit: ref.unit, move_id: ref.moveId, direction: 'forward' });
    expect(bytes.value).toBe(r.lagBytes);
    expect(bytes.value).toBeGreaterThanOrEqual(0);
  });

  it("a dropped slot's retained series leaves the page at the next reading", { timeout: 60_000 }, async () => {
    const refresher = slotRetentionRefresher(testConfig(), (s) => deps.shardPool(s), metrics, { cacheMs: 0 });
    await refresher.refresh();
    expect(await series(metrics.slotRetainedBytes.gauge, { shard: SOURCE, slot })).toHaveLength(1);
    await act.dropReplication({ ...ref, direction: 'forward' });
    // A reading of the source (dropReplication also removes the series itself; set it back to prove the reading does it).
    metrics.slotRetainedBytes.set({ shard: SOURCE, slot }, 1);
    await refresher.refresh();
    expect(await series(metrics.slotRetainedBytes.gauge, { shard: SOURCE, slot })).toEqual([]);
  });
});
