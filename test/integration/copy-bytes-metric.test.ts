// shardctl_copy_bytes_total and shardctl_rows_copied_total count each COPY stream byte and each row
// the copy phase committed exactly once, on the real stack: the copyTable activity is built
// in-process with a worker's metrics registry and run against real shards; the counters must equal
// the bytes and rows the copy's own checkpoints report, also when a delivery fails mid-table and
// Temporal retries it (with a batch-row cap, and without one as `move start` copies), when a
// finished copy is delivered again, and when another worker resumes a table the first one left half-way.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { testConfig, shardPool, uniq, closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import { createDeps, type Deps } from '../../activities/deps';
import { createActivities, type Activities } from '../../activities';
import { createMetrics, type Metrics } from '../../lib/obs/metrics';
import { copyProgress, clearCopyProgress, deleteTenantRows } from '../../lib/copy';
import { listTenantTables } from '../../lib/shard/tables';
import { unitRows } from '../../lib/unit-rows';

const SOURCE = 'shard-a';
const TARGET = 'shard-b';
/** A worker: its own metrics registry and activities; `failAt` makes the named fault point throw. */
interface Worker {
  deps: Deps;
  act: Activities;
  metrics: Metrics;
  failAt?: string;
}
const workers: Worker[] = [];
function worker(): Worker {
  const metrics = createMetrics({ processMetrics: false });
  const w = {} as Worker;
  w.metrics = metrics;
  w.deps = createDeps(testConfig(), {
    metrics,
    faultPoint: async (name) => {
      if (w.failAt === name) throw new Error(`injected failure at ${name}`);
    },
  });
  w.act = createActivities(w.deps);
  workers.push(w);
  return w;
}

/** The counter's value for the shard pair (0 when no series exists yet). */
async function bytesCounted(w: Worker): Promise<number> {
  const v = (await w.metrics.bytesCopied.get()).values.find((x) => x.labels.source === SOURCE && x.labels.target === TARGET);
  return v?.value ?? 0;
}

/** The rows counter's value for the shard pair (0 when no series exists yet). */
async function rowsCounted(w: Worker): Promise<number> {
  const v = (await w.metrics.rowsCopied.get()).values.find((x) => x.labels.source === SOURCE && x.labels.target === TARGET);
  return v?.value ?? 0;
}

/** The rows the copy's checkpoints on the target report for the move's tables. */
async function checkpointRows(moveId: string, table?: string): Promise<number> {
  const cps = (await copyProgress(shardPool(TARGET), moveId)).filter((c) => table === undefined || c.table === table);
  return cps.reduce((n, c) => n + c.rowsCopied, 0);
}

/** The bytes the copy's checkpoints on the target report for the move's tables. */
async function checkpointBytes(moveId: string, table?: string): Promise<number> {
  const cps = (await copyProgress(shardPool(TARGET), moveId)).filter((c) => table === undefined || c.table === table);
  return cps.reduce((n, c) => n + c.bytesCopied, 0);
}

let tenant: string;
let tables: string[];
const moves: string[] = [];
beforeAll(async () => {
  await H.prepareStack();
  tenant = await H.newTenant(SOURCE, 'cbm');
  await H.seed(tenant, 400, 0);
  const plan = await worker().act.planMove({ unit: tenant, target: TARGET });
  expect(plan.ok, plan.reasons.join('; ')).toBe(true);
  tables = plan.tables.map((t) => t.table);
  expect(tables).toContain('public.events');
}, 120_000);

/** Deletes the tenant's copied rows from the target (each test copies it from nothing). */
async function clearTarget() {
  const rows = unitRows(testConfig(), tenant);
  const pool = shardPool(TARGET);
  await deleteTenantRows({ pool, tables: await listTenantTables(pool, rows.tables), tenantColumn: rows.column, unit: rows.value, batchRows: 1000 });
}

afterAll(async () => {
  for (const moveId of moves) await clearCopyProgress(shardPool(TARGET), moveId);
  if (tenant) await clearTarget();
  for (const w of workers) await w.deps.close();
  await closePools();
});

/** A fresh copy id of the tenant (each test copies it again from nothing). */
async function freshMove(): Promise<{ moveId: string; unit: string; source: string; target: string }> {
  await clearTarget();
  const moveId = uniq(`${tenant}.cbm`);
  moves.push(moveId);
  return { moveId, unit: tenant, source: SOURCE, target: TARGET };
}

describe('copy bytes and rows metrics', () => {
  it('counts the bytes the copy reports for every table of a fresh copy', { timeout: 120_000 }, async () => {
    const w = worker();
    const ref = await freshMove();
    for (const table of tables) await w.act.copyTable({ ...ref, table, batchRows: 50, rowsPerSecond: 0 });
    const reported = await checkpointBytes(ref.moveId);
    expect(reported).toBeGreaterThan(0);
    expect(await bytesCounted(w)).toBe(reported);
    expect(await checkpointRows(ref.moveId)).toBe(400);
    expect(await rowsCounted(w)).toBe(400);
  });

  it('counts a table failed mid-way and retried once per byte, and a finished table delivered again not at all', { timeout: 120_000 }, async () => {
    const w = worker();
    const ref = await freshMove();
    const input = { ...ref, table: 'public.events', batchRows: 40, rowsPerSecond: 0 };
    w.failAt = 'mid-copy';
    await expect(w.act.copyTable(input)).rejects.toThrow(/injected failure at mid-copy/);
    const half = await checkpointBytes(ref.moveId, 'public.events');
    expect(half).toBeGreaterThan(0);
    expect(await bytesCounted(w)).toBe(half);
    expect(await rowsCounted(w)).toBe(80);
    // The retry on the same worker: its first batch reports the checkpoint's total plus its own.
    w.failAt = undefined;
    await w.act.copyTable(input);
    const total = await checkpointBytes(ref.moveId, 'public.events');
    expect(total).toBeGreaterThan(half);
    expect(await bytesCounted(w)).toBe(total);
    const rows = await checkpointRows(ref.moveId, 'public.events');
    expect(rows).toBe(180);
    expect(await rowsCounted(w)).toBe(rows);
    // Delivered again after it finished: nothing new is copied, nothing is counted.
    await w.act.copyTable(input);
    expect(await checkpointBytes(ref.moveId, 'public.events')).toBe(total);
    expect(await bytesCounted(w)).toBe(total);
    expect(await rowsCounted(w)).toBe(rows);
  });

  it(
    'counts the rows of a table failed mid-way and resumed once each, when its first batch after the resume is a short one or no batch-row cap is set',
    { timeout: 120_000 },
    async () => {
      // 180 event rows. A cap of 70: two batches (140 rows) before the failure, then one of 40.
      const w = worker();
      const capped = await freshMove();
      w.failAt = 'mid-copy';
      const input = { ...capped, table: 'public.events', batchRows: 70, rowsPerSecond: 0 };
      await expect(w.act.copyTable(input)).rejects.toThrow(/injected failure at mid-copy/);
      expect(await checkpointRows(capped.moveId, 'public.events')).toBe(140);
      expect(await rowsCounted(w)).toBe(140);
      w.failAt = undefined;
      await w.act.copyTable(input);
      expect(await checkpointRows(capped.moveId, 'public.events')).toBe(180);
      expect(await rowsCounted(w)).toBe(180);

      // No cap (a move started by `move start` sends none), batches held to 50 rows by a throttle
      // of 50 rows a second: 100 rows before the failure, then 50 and 30 on the retry.
      const v = worker();
      const uncapped = await freshMove();
      v.failAt = 'mid-copy';
      const throttled = { ...uncapped, table: 'public.events', rowsPerSecond: 50 };
      await expect(v.act.copyTable(throttled)).rejects.toThrow(/injected failure at mid-copy/);
      expect(await checkpointRows(uncapped.moveId, 'public.events')).toBe(100);
      expect(await rowsCounted(v)).toBe(100);
      v.failAt = undefined;
      await v.act.copyTable(throttled);
      expect(await checkpointRows(uncapped.moveId, 'public.events')).toBe(180);
      expect(await rowsCounted(v)).toBe(180);
    },
  );

  it('two overlapping deliveries of a table on one worker count its bytes once and its rows once', { timeout: 120_000 }, async () => {
    const w = worker();
    const ref = await freshMove();
    const input = { ...ref, table: 'public.events', batchRows: 20, rowsPerSecond: 0 };
    const r = await Promise.all([w.act.copyTable(input), w.act.copyTable(input)]);
    expect(r[0].rowsCopied).toBe(r[1].rowsCopied);
    const total = await checkpointBytes(ref.moveId, 'public.events');
    expect(total).toBeGreaterThan(0);
    expect(await bytesCounted(w)).toBe(total);
    expect(await checkpointRows(ref.moveId, 'public.events')).toBe(180);
    expect(await rowsCounted(w)).toBe(180);
  });

  it('a table resumed on another worker is counted there only from the checkpoint on', { timeout: 120_000 }, async () => {
    const a = worker();
    const b = worker();
    const ref = await freshMove();
    const input = { ...ref, table: 'public.events', batchRows: 40, rowsPerSecond: 0 };
    a.failAt = 'mid-copy';
    await expect(a.act.copyTable(input)).rejects.toThrow(/injected failure at mid-copy/);
    const half = await checkpointBytes(ref.moveId, 'public.events');
    await b.act.copyTable(input);
    const total = await checkpointBytes(ref.moveId, 'public.events');
    expect(total).toBeGreaterThan(half);
    expect(await bytesCounted(a)).toBe(half);
    expect(await bytesCounted(b)).toBe(total - half);
    expect(await rowsCounted(a)).toBe(80);
    expect(await rowsCounted(b)).toBe(100);
  });
});
