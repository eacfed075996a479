// `rebalance plan` measures each unit on the real shards (issue 13): tenants of very different row
// counts seeded on shard-a report their rows (exact: each table is under the sampling bound) and
// bytes in `--json`, and a shard over its headroom sheds the tenant with the fewest bytes, not the
// biggest one. With a rate window, a unit written during it (the hot one) measures a higher write
// rate than one nothing writes, and the plan takes that measured rate as its load where it exceeds
// the directory's expected load, naming the source. A fleet of the test's own (its own directory;
// the stack's shards).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { runCli } from '../helpers/cli';
import { closePools, shardPool } from '../helpers/stack';
import { listTenantTables, quoteIdent, tenantTableSelector } from '../../lib/shard/tables';
import { Router } from '../../lib/router';

let fleet: Fleet;
const cli = (args: string[]) => runCli(args, { env: { SHARDCTL_CONFIG: fleet.configFile, SHARDCTL_ACTOR: 'measure-test' } });
const tenants: Record<'big' | 'mid' | 'small', string> = { big: '', mid: '', small: '' };
/** A sampling bound that keeps every tenant table of shard-a on the exact path. */
let exactBound = 0;

/** Rows of shard-a's largest tenant table (the other suites' rows share these tables). */
async function largestTenantTable(): Promise<number> {
  const pool = shardPool('shard-a');
  let largest = 0;
  for (const t of await listTenantTables(pool, tenantTableSelector(fleet.config.tenant)))
    largest = Math.max(largest, (await pool.query(`select count(*)::int as n from ${t.qualified}`)).rows[0].n);
  return largest;
}

/** Rows of `tenant` on `shard`, counted directly over every tenant table. */
async function countRows(shard: string, tenant: string): Promise<number> {
  const pool = shardPool(shard);
  let n = 0;
  for (const t of await listTenantTables(pool, tenantTableSelector(fleet.config.tenant))) {
    const r = await pool.query(`select count(*)::int as n from ${t.qualified} where ${quoteIdent(fleet.config.tenant.column)} = $1`, [tenant]);
    n += r.rows[0].n;
  }
  return n;
}

beforeAll(async () => {
  fleet = await ownFleet('rmeasure', { worker: false });
  // Equal expected loads (so load alone cannot tell them apart), very different sizes; together
  // 3 × 400 on a shard of capacity 1000 with headroom 0.1: shard-a is over by 300.
  tenants.big = await fleet.tenant('shard-a', { prefix: 'rmbig', load: 400, rows: 6000 });
  tenants.mid = await fleet.tenant('shard-a', { prefix: 'rmmid', load: 400, rows: 600 });
  tenants.small = await fleet.tenant('shard-a', { prefix: 'rmsmall', load: 400, rows: 60 });
  exactBound = Math.max(1000, 2 * (await largestTenantTable()));
}, 180_000);

afterAll(async () => {
  await fleet?.close();
  await closePools();
});

describe('rebalance plan measures units on the shards', () => {
  it('reports each tenant’s rows and bytes, and sheds the fewest bytes from a shard over its headroom', async () => {
    // A tolerance this wide leaves only the headroom goal: the plan is the relief alone. The other
    // suites' rows share these tables (a long-lived stack holds more than the default bound): a
    // bound above the largest table keeps every table on the exact path.
    const r = await cli(['rebalance', 'plan', '--json', '--tolerance', '10', '--rate-window', '0', '--sample-rows', String(exactBound)]);
    expect(r.code, r.stderr).toBe(0);
    const plan = JSON.parse(r.stdout);
    const size = new Map<string, { rows: number; bytes: number; shard: string }>(plan.measurement.units.map((u: any) => [u.unit, u]));
    for (const t of Object.values(tenants)) {
      expect(size.get(t)?.shard, t).toBe('shard-a');
      expect(size.get(t)!.rows, `${t}: measured rows equal the rows there`).toBe(await countRows('shard-a', t));
    }
    expect(size.get(tenants.big)!.bytes).toBeGreaterThan(size.get(tenants.mid)!.bytes);
    expect(size.get(tenants.mid)!.bytes).toBeGreaterThan(size.get(tenants.small)!.bytes);
    expect(size.get(tenants.small)!.bytes).toBeGreaterThan(0);
    expect(plan.measurement.shards.find((s: any) => s.shard === 'shard-a')).toMatchObject({ measured: true, sampledTables: 0 });
    // Any one tenant covers the 300 over; the smallest in bytes is the one planned.
    expect(plan.moves.map((m: any) => [m.unit, m.from, m.bytes])).toEqual([[tenants.small, 'shard-a', size.get(tenants.small)!.bytes]]);
    expect(plan.moves[0].reason).toMatch(/shard-a at .* is over its headroom/);
    expect(plan.moves[0]).toHaveProperty('estimatedSeconds');
    const a = plan.shards.find((s: any) => s.name === 'shard-a');
    expect(a.bytesBefore - a.bytesAfter).toBe(size.get(tenants.small)!.bytes);
    expect(a.loadAfter).toBe(800);
  });

  it('--headroom decides how much is shed: the cover with the fewest bytes', async () => {
    const r = await cli(['rebalance', 'plan', '--json', '--tolerance', '10', '--rate-window', '0', '--sample-rows', String(exactBound), '--headroom', '0']);
    expect(r.code, r.stderr).toBe(0);
    const plan = JSON.parse(r.stdout);
    // 1200 on a capacity of 1000 is over even with no headroom: still one move, the smallest.
    expect(plan.moves.map((m: any) => m.unit)).toEqual([tenants.small]);
    const half = JSON.parse(
      (await cli(['rebalance', 'plan', '--json', '--tolerance', '10', '--rate-window', '0', '--sample-rows', String(exactBound), '--headroom', '0.5'])).stdout,
    );
    // Usable 500 of 1000: 700 over; two smaller tenants (800) or the biggest (400 < 700) alone cannot;
    // the cover with the fewest bytes is small + mid.
    expect(half.moves.map((m: any) => m.unit).sort()).toEqual([tenants.mid, tenants.small].sort());
  });
});

describe('measureShard over its sampling bound', () => {
  it('reads a table bigger than the bound through a block sample, scaled: the big tenant within ±30 % of its rows', async () => {
    const { measureShard } = await import('../../lib/rebalance/measure');
    const exact = await measureShard(shardPool('shard-a'), fleet.config, 'shard-a', { sampleRows: exactBound });
    const truth = await countRows('shard-a', tenants.big);
    expect(exact.units.get(tenants.big)?.rows).toBe(truth);
    // A bound of a quarter of the largest tenant table's rows: that table is sampled at about 25 %
    // of its blocks (the other suites' rows share these tables, so their size is read, not
    // assumed; at ~2 % of the blocks the big tenant's clustered rows gave 1.5× the truth once).
    const pool = shardPool('shard-a');
    const largest = await largestTenantTable();
    await pool.query('analyze');
    const sampled = await measureShard(pool, fleet.config, 'shard-a', { sampleRows: Math.ceil(largest / 4) });
    expect(sampled.error).toBeUndefined();
    expect(sampled.sampledTables.length).toBeGreaterThan(0);
    for (const s of sampled.sampledTables) expect(s.percent).toBeLessThan(100);
    const est = sampled.units.get(tenants.big)?.rows ?? 0;
    expect(est, `estimate ${est} of ${truth}`).toBeGreaterThan(truth * 0.7);
    expect(est, `estimate ${est} of ${truth}`).toBeLessThan(truth * 1.3);
  });
});

describe('a shard that cannot be measured', () => {
  it('is planned by the expected load, and the plan says so', async () => {
    const { planFromDirectory } = await import('../../lib/rebalance/fleet');
    const { openPool } = await import('../../lib/connections');
    // shard-b's pool points at a port nothing listens on: its measurement fails, the plan goes on.
    const dead = openPool('postgres://nobody@127.0.0.1:1/none', { max: 1, connectionTimeoutMillis: 2000 });
    try {
      const plan = await planFromDirectory(
        fleet.directory,
        fleet.config,
        { kind: 'rebalance' },
        { tolerance: 10 },
        { shardPool: (name) => (name === 'shard-b' ? dead : shardPool(name)) },
      );
      expect(plan.measurement!.shards.find((s) => s.shard === 'shard-b')).toMatchObject({ measured: false, error: expect.any(String) });
      expect(plan.problems).toContainEqual(
        expect.stringMatching(/^shard-b could not be measured \(.*\): its units are planned by the directory's expected load, with no bytes$/),
      );
      // shard-a was measured all the same, and its relief is the same smallest tenant.
      expect(plan.measurement!.shards.find((s) => s.shard === 'shard-a')).toMatchObject({ measured: true });
      expect(plan.moves.map((m) => m.unit)).toEqual([tenants.small]);
      expect(plan.measurement!.units.some((u) => u.shard === 'shard-b')).toBe(false);
    } finally {
      await dead.end();
    }
  });
});

describe('per-unit write rate', () => {
  it('a unit written during the window measures a higher writes/s than one nothing writes, and the plan loads it by that measure', async () => {
    // Both on shard-b (nothing else of this fleet there), expected load 1 each.
    const hot = await fleet.tenant('shard-b', { prefix: 'rmhot', load: 1, rows: 50 });
    const cold = await fleet.tenant('shard-b', { prefix: 'rmcold', load: 1, rows: 50 });
    const router = await Router.create(fleet.config);
    let stop = false;
    let inserted = 0;
    // Ten new rows per routed transaction, for as long as the plan runs (its window included).
    const writer = (async () => {
      while (!stop) {
        await router.withTenant(hot, { tenants: [hot] }, 'write', (tx) =>
          tx.query(`insert into public.events (tenant_id, kind) select $1, 'hot' from generate_series(1, 10)`, [hot]),
        );
        inserted += 10;
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    try {
      while (inserted < 50) await new Promise((r) => setTimeout(r, 50));
      const r = await cli(['rebalance', 'plan', '--json', '--tolerance', '10', '--rate-window', '3s', '--sample-rows', String(exactBound)]);
      stop = true;
      await writer;
      expect(r.code, r.stderr).toBe(0);
      const plan = JSON.parse(r.stdout);
      const unit = new Map<string, any>(plan.measurement.units.map((u: any) => [u.unit, u]));
      const h = unit.get(hot);
      const c = unit.get(cold);
      console.log(`measured writes/s: hot ${h.writesPerSecond}, cold ${c.writesPerSecond}; rows inserted by the writer ${inserted}`);
      expect(c.writesPerSecond).toBe(0);
      expect(h.writesPerSecond).toBeGreaterThan(c.writesPerSecond);
      expect(h.writesPerSecond).toBeGreaterThan(1);
      // The hot unit's load is its measured rate (above its expected 1), the cold one keeps its expected load.
      expect(h).toMatchObject({ expectedLoad: 1, loadSource: 'measured', load: Math.ceil(h.writesPerSecond) });
      expect(c).toMatchObject({ expectedLoad: 1, loadSource: 'expected', load: 1 });
      expect(plan.measurement.method).toMatch(/writes per unit from the rows whose xmin is a transaction id assigned in that window/);
      expect(plan.shards.find((s: any) => s.name === 'shard-b').loadBefore).toBeGreaterThanOrEqual(h.load + 1);
    } finally {
      stop = true;
      await writer.catch(() => {});
      await router.close();
    }
  });
});
