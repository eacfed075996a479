// `tenant split T --ways K` on a real shard and directory (docs/architecture.md, "Splitting a
// tenant"): the directory turns T into T:0 .. T:K-1 at the same shard and epoch + 1 (no row
// moves), the shard fences each sub-unit by stable_hash(split column) mod K exactly as Node names
// it, a router still holding T's old route is refused (SC421) and retries on the row's sub-unit,
// writes of every sub-unit keep being acknowledged through the split, and a split is refused while
// a move owns the tenant. An unsplit tenant on the same tables behaves as before.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomBytes } from 'node:crypto';
import { shardPool, directoryPool, uniq } from '../helpers/stack';
import { dropSplitSchema, setUpSplitSchema } from '../helpers/split-schema';
import { fenceStatus } from '../../lib/shard/prepare';
import { splitRowUnitSql } from '../../lib/shard/fence-sql';
import { subUnitClauseSql } from '../../lib/shard/split-sql';
import { createTenant } from '../../lib/tenants';
import { splitTenant } from '../../lib/tenant-split';
import { tenantUnitForRow } from '../../lib/buckets/route';
import { compareAndSetPlacement, getPlacement, insertPlacement } from '../../lib/directory/placements';
import { getSplit, splitPlacement } from '../../lib/directory/splits';
import { recordMoveEvent } from '../../lib/directory/moves';
import { getUnitFence } from '../../lib/shard/fence';
import { installSubUnitFences, subUnitFences } from '../../lib/shard/split';
import type { Config } from '../../lib/config';
import { Router } from '../../lib/router';
import { ShardctlError } from '../../lib/errors';
import { runCli, configFile } from '../helpers/cli';
import { planFromDirectory } from '../../lib/rebalance/fleet';
import { planAdoption } from '../../lib/adopt';
import * as H from '../helpers/move';

const SHARD = 'shard-a';
const WAYS = 4;
const schema = `sp_${randomBytes(4).toString('hex')}`;
const grant = { tenants: '*' as const };
let config: Config;

/** Keys of every kind a text column holds: ASCII, 2-, 3- and 4-byte UTF-8, empty. */
function randomKey(i: number): string {
  const alphabet = ['a', 'Z', '7', 'ü', 'ß', 'é', '東', '京', '🦀', '🎉', ' ', '-', 'Ω'];
  const n = i % 9;
  let s = '';
  for (let j = 0; j < n; j++) s += alphabet[randomBytes(1)[0] % alphabet.length];
  return s + (i % 3 === 0 ? '' : String(i));
}

/** A key whose row falls in sub-unit `k` of the split tenant. */
function keyIn(tenant: string, k: number, prefix = 'key'): string {
  const splits = new Map([[tenant, WAYS]]);
  for (let i = 0; ; i++) if (tenantUnitForRow(tenant, `${prefix}${i}`, splits) === `${tenant}:${k}`) return `${prefix}${i}`;
}

beforeAll(async () => {
  config = await setUpSplitSchema(
    SHARD,
    schema,
    { orders: 'order_key', lines: 'order_key' },
    `create table ${schema}.orders (tenant_id text not null, order_key text not null, v int not null default 0, primary key (tenant_id, order_key));
     create table ${schema}.lines (tenant_id text not null, order_key text not null, n int not null, primary key (tenant_id, order_key, n))`,
  );
}, 60_000);

afterAll(() => dropSplitSchema(SHARD, schema));

async function newTenant(): Promise<string> {
  const tenant = uniq('sp');
  await createTenant({ directory: directoryPool(), shardPool, config }, { tenant, shard: SHARD, actor: 'test' });
  return tenant;
}

/** Runs `sql` on SHARD in a transaction opened for `unit` at `epoch` (as the router opens one): 'ok' or the SQLSTATE. */
const inUnitTx = (unit: string | null, epoch: number, sql: string, params: unknown[] = []) => H.inUnitTx(SHARD, unit, epoch, sql, params);

const deps = () => ({ directory: directoryPool(), shardPool, config });

describe('tenant split on a real shard', () => {
  it('prepare fences the tables with a split column by their sub-unit expression, and shards list reads them as fenced', async () => {
    const st = await fenceStatus(shardPool(SHARD), config);
    expect(st.fenced).toEqual(expect.arrayContaining([`${schema}.orders`, `${schema}.lines`]));
    expect(st.unfenced.filter((t) => t.startsWith(schema))).toEqual([]);
  });

  it.each([3, 4, 7, 1000])(
    "Node's and SQL's unit of a row agree on 2000 random keys, non-ASCII included (split %i ways)",
    { timeout: 60_000 },
    async (ways) => {
      const tenant = await newTenant();
      const r = await splitTenant(deps(), { tenant, ways, actor: 'test' });
      const keys = Array.from({ length: 2000 }, (_, i) => randomKey(i));
      expect(keys.some((k) => Buffer.byteLength(k) > k.length)).toBe(true);
      const c = await shardPool(SHARD).connect();
      try {
        await c.query('begin');
        // The fence's own expression (over alias r instead of the trigger's new), in a transaction checked for a sub-unit (so split_ways_of(checked_unit()) is K).
        await c.query('call shardctl.open_unit_write($1, $2)', [`${tenant}:1`, r.epoch]);
        const q = await c.query(
          `select r.order_key as k, ${splitRowUnitSql('tenant_id', 'order_key')('r' as 'new')} as unit
           from (select $1::text as tenant_id, k as order_key from unnest($2::text[]) k) r`,
          [tenant, keys],
        );
        await c.query('rollback');
        const splits = new Map([[tenant, ways]]);
        const disagree = q.rows.filter((x) => x.unit !== tenantUnitForRow(tenant, x.k, splits));
        expect(disagree).toEqual([]);
        // Every sub-unit is hit (of 1000, most): the keys spread, the test is not vacuous.
        expect(new Set(q.rows.map((x) => x.unit)).size).toBeGreaterThanOrEqual(Math.min(ways, 500));
      } finally {
        c.release();
      }
    },
  );

  it.each([4, 7])(
    "a sub-unit move's row predicate selects exactly the rows the fence and Node put in that sub-unit (2000 random keys, split %i ways)",
    { timeout: 60_000 },
    async (ways) => {
      const tenant = `pred-${randomBytes(3).toString('hex')}`;
      const keys = Array.from({ length: 2000 }, (_, i) => randomKey(i) + `-${i}`);
      const splits = new Map([[tenant, ways]]);
      const c = await shardPool(SHARD).connect();
      try {
        for (let k = 0; k < ways; k++) {
          // The predicate a move of T:k appends to the tenant's (lib/shard/split-sql.ts), over rows of T and of another tenant.
          const q = await c.query(
            `select r.order_key as k from (select t as tenant_id, k as order_key from unnest($2::text[]) k, unnest(array[$1::text, 'other']) t) r
              where r.tenant_id = $1${subUnitClauseSql({ column: 'order_key', ways, index: k }, 'r')}`,
            [tenant, keys],
          );
          const want = keys.filter((key) => tenantUnitForRow(tenant, key, splits) === `${tenant}:${k}`);
          expect(want.length).toBeGreaterThan(0);
          expect(q.rows.map((x) => x.k).sort()).toEqual([...want].sort());
        }
      } finally {
        c.release();
      }
    },
  );

  it(
    'tenant split (CLI) places K sub-units on the same shard at epoch + 1, moves no row, audits it, disowns the tenant; a re-run changes nothing; a drain plans each sub-unit off the shard and never the tenant, and a sub-unit of a sub-unit is refused',
    { timeout: 60_000 },
    async () => {
      const tenant = await newTenant();
      const router = await Router.create(config);
      const keys = Array.from({ length: 40 }, (_, i) => randomKey(i + 1) + `-${i}`);
      try {
        for (const k of keys)
          await router.withTenant(tenant, grant, 'write', (tx) => tx.query(`insert into ${schema}.orders(tenant_id, order_key) values ($1, $2)`, [tenant, k]));
      } finally {
        await router.close();
      }
      const before = (await getPlacement(directoryPool(), tenant))!;
      const f = configFile(config);
      try {
        const env = { SHARDCTL_CONFIG: f.file };
        const out = await runCli(['tenant', 'split', tenant, '--ways', String(WAYS), '--reason', 'hot', '--json'], { env });
        expect(out.code, out.stderr).toBe(0);
        const units = Array.from({ length: WAYS }, (_, k) => `${tenant}:${k}`);
        expect(JSON.parse(out.stdout)).toEqual({ tenant, ways: WAYS, shard: SHARD, epoch: before.epoch + 1, units, resumed: false });
        expect(await getPlacement(directoryPool(), tenant)).toBeUndefined();
        for (const u of units) expect(await getPlacement(directoryPool(), u)).toMatchObject({ shard: SHARD, epoch: before.epoch + 1, state: 'active' });
        expect(await getSplit(directoryPool(), tenant)).toMatchObject({ ways: WAYS, shard: SHARD, parentEpoch: before.epoch });
        const audit = await directoryPool().query(`select actor, reason, detail from shardctl.audit where unit = $1 and action = 'tenant.split'`, [tenant]);
        expect(audit.rows).toHaveLength(1);
        expect(audit.rows[0]).toMatchObject({ reason: 'hot', detail: { shard: SHARD, ways: WAYS, units, epoch: before.epoch + 1 } });
        // The shard: the sub-units owned at the new epoch with their ways; the tenant's own fence disowned at it.
        expect(await subUnitFences(shardPool(SHARD), units)).toEqual(
          units.map((unit) => ({ unit, epoch: before.epoch + 1, owned: true, frozen: false, ways: WAYS })),
        );
        expect(await getUnitFence(shardPool(SHARD), tenant)).toMatchObject({ epoch: before.epoch + 1, owned: false });
        const rows = await shardPool(SHARD).query(`select order_key from ${schema}.orders where tenant_id = $1 order by 1`, [tenant]);
        expect(rows.rows).toHaveLength(keys.length);
        expect(new Set(rows.rows.map((x) => x.order_key))).toEqual(new Set(keys));
        // A re-run completes nothing new; another K is refused.
        const again = await runCli(['tenant', 'split', tenant, '--ways', String(WAYS), '--json'], { env });
        expect(again.code, again.stderr).toBe(0);
        expect(JSON.parse(again.stdout)).toMatchObject({ resumed: true, epoch: before.epoch + 1 });
        const other = await runCli(['tenant', 'split', tenant, '--ways', '8'], { env });
        expect(other.code).not.toBe(0);
        expect(other.stderr).toContain(`already split ${WAYS} ways`);
        const show = await runCli(['tenant', 'show', tenant, '--json'], { env });
        expect(show.code, show.stderr).toBe(0);
        const shown = JSON.parse(show.stdout);
        expect(shown).toMatchObject({ tenant, split: { ways: WAYS, shard: SHARD, parentEpoch: before.epoch } });
        expect(shown.units.map((u: { tenant: string }) => u.tenant)).toEqual(units);
        // Only a tenant splits (one level): a sub-unit of a sub-unit is refused before anything is
        // sent. Each sub-unit is a unit of its own to the planner: a drain moves every one, never T.
        const move = await runCli(['move', 'plan', '--unit', `${tenant}:1:0`, '--to', 'shard-b'], { env });
        expect(move.code).not.toBe(0);
        expect(move.stderr).toContain('only a tenant splits (one level)');
        const drain = await planFromDirectory(directoryPool(), config, { kind: 'drain', shard: SHARD });
        expect(
          drain.moves
            .filter((m) => m.unit === tenant || m.unit.startsWith(`${tenant}:`))
            .map((m) => [m.unit, m.from])
            .sort(),
        ).toEqual(units.map((u) => [u, SHARD]));
        expect(drain.problems.filter((p) => p.includes(tenant))).toEqual([]);
      } finally {
        f.remove();
      }
    },
  );

  it(
    "rebalance plan measures a split tenant per sub-unit: each sub-unit's rows and bytes by the fence's expression, and its own write rate in the window (a hot sub-unit's above its siblings'); no unit is named after the tenant",
    { timeout: 60_000 },
    async () => {
      const tenant = await newTenant();
      await splitTenant(deps(), { tenant, ways: WAYS, actor: 'test' });
      const splits = new Map([[tenant, WAYS]]);
      const keys = Array.from({ length: 80 }, (_, i) => `${randomKey(i + 1)}-${i}`);
      const router = await Router.create(config);
      try {
        for (const k of keys)
          await router.withTenant(tenant, grant, 'write', (tx) => tx.query(`insert into ${schema}.orders(tenant_id, order_key) values ($1, $2)`, [tenant, k]), {
            splitKey: k,
          });
        const hot = `${tenant}:2`;
        const hotKeys = keys.filter((k) => tenantUnitForRow(tenant, k, splits) === hot);
        expect(hotKeys.length).toBeGreaterThan(3);
        // New rows of the hot sub-unit through the window (and past it), nothing else written. Inserts,
        // not updates: the measure counts a row's latest version, and a few rows updated in a loop were
        // all rewritten again after the window closed before the scan reached them (1 run in 3 at load ~7).
        let stop = false;
        let inserted = 0;
        const writer = (async () => {
          for (let i = 0; !stop; i++) {
            const k = `hot-${i}`;
            if (tenantUnitForRow(tenant, k, splits) !== hot) continue;
            await router.withTenant(
              tenant,
              grant,
              'write',
              (tx) => tx.query(`insert into ${schema}.orders(tenant_id, order_key) values ($1, $2)`, [tenant, k]),
              {
                splitKey: k,
              },
            );
            inserted++;
          }
        })();
        await new Promise((r) => setTimeout(r, 200));
        let plan;
        try {
          plan = await planFromDirectory(directoryPool(), config, { kind: 'rebalance' }, {}, { shardPool, windowMs: 1500 });
        } finally {
          stop = true;
          await writer;
        }
        const measured = new Map(plan.measurement!.units.map((u) => [u.unit, u]));
        expect(measured.has(tenant)).toBe(false);
        for (let k = 0; k < WAYS; k++) {
          const unit = `${tenant}:${k}`;
          const want = keys.filter((key) => tenantUnitForRow(tenant, key, splits) === unit).length;
          expect(want).toBeGreaterThan(0);
          // The hot sub-unit's rows: its seeded ones plus what the writer had inserted by the scan.
          if (unit === hot) expect(measured.get(unit)!.rows, unit).toBeGreaterThanOrEqual(want);
          else expect(measured.get(unit), unit).toMatchObject({ shard: SHARD, rows: want });
          expect(measured.get(unit)!.rows, unit).toBeLessThanOrEqual(want + inserted);
          expect(measured.get(unit)!.bytes, unit).toBeGreaterThan(0);
          if (unit !== hot) expect(measured.get(unit)!.writesPerSecond, unit).toBe(0);
        }
        // The hot sub-unit's rate is its own (the rows inserted in the window), above the directory's ⌈load / K⌉.
        const h = measured.get(hot)!;
        expect(h.writesPerSecond).toBeGreaterThan(0);
        expect(h).toMatchObject({ loadSource: 'measured', load: Math.ceil(h.writesPerSecond!) });
        expect(plan.moves.map((m) => m.unit)).not.toContain(tenant);
      } finally {
        await router.close();
      }
    },
  );

  it('a sub-unit transaction writes only rows of its sub-unit: another sub-unit, another tenant or the old tenant route is refused', async () => {
    const tenant = await newTenant();
    const other = await newTenant();
    const { epoch } = await splitTenant(deps(), { tenant, ways: WAYS, actor: 'test' });
    const k1 = keyIn(tenant, 1);
    const k2 = keyIn(tenant, 2);
    const ins = `insert into ${schema}.orders(tenant_id, order_key) values ($1, $2)`;
    expect(await inUnitTx(`${tenant}:1`, epoch, ins, [tenant, k1])).toBe('ok');
    expect(await inUnitTx(`${tenant}:1`, epoch, `insert into ${schema}.lines(tenant_id, order_key, n) values ($1, $2, 1)`, [tenant, k1])).toBe('ok');
    expect(await inUnitTx(`${tenant}:1`, epoch, ins, [tenant, k2])).toBe('SC403');
    expect(await inUnitTx(`${tenant}:1`, epoch, ins, [other, k1])).toBe('SC403');
    expect(await inUnitTx(`${tenant}:1`, epoch - 1, ins, [tenant, k1])).toBe('SC421');
    // The tenant's own route, at its old epoch or the new one, owns nothing any more.
    expect(await inUnitTx(tenant, epoch - 1, ins, [tenant, k1])).toBe('SC421');
    expect(await inUnitTx(tenant, epoch, ins, [tenant, k1])).toBe('SC421');
    // A row of sub-unit 2 (committed through its own sub-unit) cannot be updated into, out of or deleted by sub-unit 1.
    expect(await inUnitTx(`${tenant}:2`, epoch, ins, [tenant, k2])).toBe('ok');
    const c = await shardPool(SHARD).connect();
    try {
      await c.query('begin');
      await c.query('call shardctl.open_unit_write($1, $2)', [`${tenant}:2`, epoch]);
      await c.query(ins, [tenant, k2]);
      await c.query('commit');
    } finally {
      c.release();
    }
    expect(await inUnitTx(`${tenant}:1`, epoch, `delete from ${schema}.orders where tenant_id = $1 and order_key = $2`, [tenant, k2])).toBe('SC403');
    expect(await inUnitTx(`${tenant}:2`, epoch, `update ${schema}.orders set order_key = $3 where tenant_id = $1 and order_key = $2`, [tenant, k2, k1])).toBe(
      'SC403',
    );
    expect(await inUnitTx(`${tenant}:2`, epoch, `update ${schema}.orders set v = v + 1 where tenant_id = $1 and order_key = $2`, [tenant, k2])).toBe('ok');
    // An unsplit tenant on the same tables: its own rows pass, the split tenant's are refused.
    const o = (await getPlacement(directoryPool(), other))!;
    expect(await inUnitTx(other, o.epoch, ins, [other, k1])).toBe('ok');
    expect(await inUnitTx(other, o.epoch, ins, [tenant, k1])).toBe('SC403');
  });

  it(
    'through the router: writes of every sub-unit are acknowledged through the split, a stale route is refused (SC421) and retried on the sub-unit',
    { timeout: 60_000 },
    async () => {
      const tenant = await newTenant();
      // A router that never hears of the split by itself (no NOTIFY, no TTL reload in the test's time).
      const stale = await Router.create(config, { listen: false, snapshotTtlMs: 600_000 });
      const live = await Router.create(config);
      const acked: string[] = [];
      const failed: string[] = [];
      const write = (r: Router, key: string) =>
        r.withTenant(tenant, grant, 'write', (tx) => tx.query(`insert into ${schema}.orders(tenant_id, order_key) values ($1, $2)`, [tenant, key]), {
          splitKey: key,
          deadlineMs: 20_000,
        });
      try {
        await write(stale, 'before-split');
        acked.push('before-split');
        let stop = false;
        const writer = (async () => {
          for (let i = 0; !stop; i++) {
            const key = `${randomKey(i)}~${i}`;
            try {
              await write(live, key);
              acked.push(key);
            } catch (e) {
              failed.push(String(e));
            }
          }
        })();
        await new Promise((r) => setTimeout(r, 300));
        const split = await splitTenant(deps(), { tenant, ways: WAYS, actor: 'test' });
        await new Promise((r) => setTimeout(r, 300));
        stop = true;
        await writer;
        expect(failed.slice(0, 3)).toEqual([]);
        // The stale router still routes the tenant to its old epoch: refused, refreshed, retried on the sub-unit.
        const key = keyIn(tenant, 3, 'stale');
        const staleBefore = stale.metrics().staleRetries;
        const route = await stale.withTenant(
          tenant,
          grant,
          'write',
          async (tx, rt) => {
            await tx.query(`insert into ${schema}.orders(tenant_id, order_key) values ($1, $2)`, [tenant, key]);
            return rt;
          },
          { splitKey: key },
        );
        acked.push(key);
        expect(route).toMatchObject({ unit: `${tenant}:3`, shard: SHARD, epoch: split.epoch });
        expect(stale.metrics().staleRetries).toBeGreaterThan(staleBefore);
        // Without the split key a split tenant's call is refused before any I/O, naming what is missing.
        await expect(live.withTenant(tenant, grant, 'write', async () => 1)).rejects.toThrow(/split 4 ways.*pass splitKey/);
        // Every acknowledged write is there, in the sub-unit Node names for it; writes landed in every sub-unit.
        const rows = await shardPool(SHARD).query(`select order_key from ${schema}.orders where tenant_id = $1`, [tenant]);
        expect(new Set(rows.rows.map((x) => x.order_key))).toEqual(new Set(acked));
        const splits = new Map([[tenant, WAYS]]);
        expect(new Set(acked.slice(1).map((k) => tenantUnitForRow(tenant, k, splits))).size).toBe(WAYS);
      } finally {
        await stale.close();
        await live.close();
      }
    },
  );

  it("one session writes an unsplit tenant, then sub-units of a 4-way and a 2-way split in turn: each statement is tested against its own transaction's sub-unit", async () => {
    const plain = await newTenant();
    const four = await newTenant();
    const two = await newTenant();
    const e4 = (await splitTenant(deps(), { tenant: four, ways: 4, actor: 'test' })).epoch;
    const e2 = (await splitTenant(deps(), { tenant: two, ways: 2, actor: 'test' })).epoch;
    const plainEpoch = (await getPlacement(directoryPool(), plain))!.epoch;
    const splits = new Map([
      [four, 4],
      [two, 2],
    ]);
    const c = await shardPool(SHARD).connect();
    const outcome = async (unit: string, epoch: number, tenant: string, key: string) => {
      try {
        await c.query('begin');
        await c.query('call shardctl.open_unit_write($1, $2)', [unit, epoch]);
        await c.query(`insert into ${schema}.orders(tenant_id, order_key) values ($1, $2)`, [tenant, key]);
        await c.query('commit');
        return 'ok';
      } catch (e: any) {
        await c.query('rollback');
        return e.code ?? String(e);
      }
    };
    const wrong: string[] = [];
    try {
      for (let i = 0; i < 120; i++) {
        const key = `${randomKey(i)}~${i}`;
        const [tenant, epoch] = i % 3 === 0 ? [plain, plainEpoch] : i % 3 === 1 ? [four, e4] : [two, e2];
        const unit = tenant === plain ? plain : tenantUnitForRow(tenant, key, splits);
        if ((await outcome(unit, epoch, tenant, key)) !== 'ok') wrong.push(`${unit} refused its own row ${JSON.stringify(key)}`);
        if (tenant !== plain) {
          // The same row under a sibling sub-unit of its split: refused.
          const ways = splits.get(tenant)!;
          const sibling = `${tenant}:${(Number(unit.split(':').pop()) + 1) % ways}`;
          if ((await outcome(sibling, epoch, tenant, `${key}!`)) === 'ok' && tenantUnitForRow(tenant, `${key}!`, splits) !== sibling)
            wrong.push(`${sibling} accepted a row of ${tenantUnitForRow(tenant, `${key}!`, splits)}`);
        }
      }
    } finally {
      c.release();
    }
    expect(wrong).toEqual([]);
  });

  it('a split is refused while a move owns the tenant, and changes nothing', async () => {
    const tenant = await newTenant();
    const p = (await getPlacement(directoryPool(), tenant))!;
    const cas = await compareAndSetPlacement(
      directoryPool(),
      tenant,
      { shard: p.shard, epoch: p.epoch, state: 'active' },
      { shard: p.shard, state: 'moving', moveId: `mv-${tenant}` },
      { actor: 'test', action: 'test.freeze' },
    );
    expect(cas.ok).toBe(true);
    const err = await splitTenant(deps(), { tenant, ways: WAYS, actor: 'test' }).catch((e) => e);
    expect(err).toBeInstanceOf(ShardctlError);
    expect(err.type).toBe('PreconditionFailed');
    expect(err.message).toContain('moving');
    expect(await getPlacement(directoryPool(), tenant)).toMatchObject({ state: 'moving', epoch: p.epoch });
    expect(await getSplit(directoryPool(), tenant)).toBeUndefined();
    expect(await subUnitFences(shardPool(SHARD), [`${tenant}:0`, `${tenant}:1`])).toEqual([]);
    expect(await getUnitFence(shardPool(SHARD), tenant)).toMatchObject({ epoch: p.epoch, owned: true });
  });

  it('a split is refused while the tenant has a move that has not ended (a soak keeps its source as the way back), and changes nothing', async () => {
    const tenant = await newTenant();
    const p = (await getPlacement(directoryPool(), tenant))!;
    const moveId = `mv-${tenant}`;
    const event = { moveId, unit: tenant, source: SHARD, target: 'shard-b', workflowId: `move-${tenant}`, actor: 'test' };
    await recordMoveEvent(directoryPool(), { ...event, action: 'switched', status: 'soak' }, null);
    const err = await splitTenant(deps(), { tenant, ways: WAYS, actor: 'test' }).catch((e) => e);
    expect(err.type).toBe('PreconditionFailed');
    expect(err.message).toContain(`has a move that has not ended (${moveId}, soak)`);
    expect(await getPlacement(directoryPool(), tenant)).toMatchObject({ shard: SHARD, epoch: p.epoch, state: 'active' });
    expect(await subUnitFences(shardPool(SHARD), [`${tenant}:0`, `${tenant}:3`])).toEqual([]);
    // Once the move has ended, the split goes ahead.
    await recordMoveEvent(directoryPool(), { ...event, action: 'retired', status: 'retired' }, null);
    expect(await splitTenant(deps(), { tenant, ways: WAYS, actor: 'test' })).toMatchObject({ epoch: p.epoch + 1 });
  });

  it('a split stopped after its fences, or after the directory, is completed by a re-run (the tenant then disowned); nothing is done twice', async () => {
    // Stopped after (1): the sub-unit fences are there, the directory is not split.
    const first = await newTenant();
    const p1 = (await getPlacement(directoryPool(), first))!;
    expect(await installSubUnitFences(shardPool(SHARD), first, WAYS, p1.epoch + 1)).toMatchObject({ installed: expect.any(Array), conflicting: [] });
    expect(await splitTenant(deps(), { tenant: first, ways: WAYS, actor: 'test' })).toMatchObject({ resumed: false, epoch: p1.epoch + 1 });
    expect(await getUnitFence(shardPool(SHARD), first)).toMatchObject({ epoch: p1.epoch + 1, owned: false });
    // Stopped after (2): the directory is split, the tenant's fence still owns it at the old epoch.
    const second = await newTenant();
    const p2 = (await getPlacement(directoryPool(), second))!;
    await installSubUnitFences(shardPool(SHARD), second, WAYS, p2.epoch + 1);
    expect(await splitPlacement(directoryPool(), second, WAYS, { shard: SHARD, epoch: p2.epoch }, { actor: 'test' })).toMatchObject({ ok: true });
    expect(await inUnitTx(second, p2.epoch, `insert into ${schema}.orders(tenant_id, order_key) values ($1, 'x')`, [second])).toBe('ok');
    expect(await splitTenant(deps(), { tenant: second, ways: WAYS, actor: 'test' })).toMatchObject({ resumed: true, epoch: p2.epoch + 1 });
    expect(await inUnitTx(second, p2.epoch, `insert into ${schema}.orders(tenant_id, order_key) values ($1, 'x')`, [second])).toBe('SC421');
    const audit = await directoryPool().query(`select count(*)::int as n from shardctl.audit where unit = $1 and action = 'tenant.split'`, [second]);
    expect(audit.rows[0].n).toBe(1);
  });

  it("a split tenant's name is never placed again: tenant create is refused, and so is the directory's insert, leaving no fence", async () => {
    const tenant = await newTenant();
    await splitTenant(deps(), { tenant, ways: 2, actor: 'test' });
    const err = await createTenant({ directory: directoryPool(), shardPool, config }, { tenant, shard: 'shard-b', actor: 'test' }).catch((e) => e);
    expect(err.type).toBe('AlreadyExists');
    expect(err.message).toContain('split 2 ways');
    const direct = await insertPlacement(
      directoryPool(),
      { unit: tenant, kind: 'tenant', shard: 'shard-b', expectedLoad: 1 },
      { actor: 'test', action: 'test.insert' },
    ).catch((e) => e);
    expect(direct.type).toBe('Conflict');
    expect(await getPlacement(directoryPool(), tenant)).toBeUndefined();
    expect(await getUnitFence(shardPool('shard-b'), tenant)).toBeUndefined();
  });

  it(
    "shards adopt counts a split tenant's rows on its own shard as present, and refuses them on another shard, naming the split",
    { timeout: 60_000 },
    async () => {
      const tenant = await newTenant();
      await splitTenant(deps(), { tenant, ways: 2, actor: 'test' });
      const k = keyIn(tenant, 1);
      const c = await shardPool(SHARD).connect();
      try {
        await c.query('begin');
        await c.query('call shardctl.open_unit_write($1, $2)', [`${tenant}:1`, (await getPlacement(directoryPool(), `${tenant}:1`))!.epoch]);
        await c.query(`insert into ${schema}.orders(tenant_id, order_key) values ($1, $2)`, [tenant, k]);
        await c.query('commit');
      } finally {
        c.release();
      }
      const adoptDeps = { directory: directoryPool(), shardPool, config };
      const here = await planAdoption(adoptDeps, { shard: SHARD, actor: 'test' });
      expect(here.present).toContain(tenant);
      expect(here.place).not.toContain(tenant);
      expect(here.reasons.filter((r) => r.includes(tenant))).toEqual([]);
      // The same rows on another shard are not theirs to claim.
      const other = shardPool('shard-b');
      await other.query(`create schema ${schema};
      create table ${schema}.orders (tenant_id text not null, order_key text not null, v int not null default 0, primary key (tenant_id, order_key));
      create table ${schema}.lines (tenant_id text not null, order_key text not null, n int not null, primary key (tenant_id, order_key, n));
      insert into ${schema}.orders(tenant_id, order_key) values ('${tenant}', 'stray')`);
      try {
        const there = await planAdoption(adoptDeps, { shard: 'shard-b', actor: 'test' });
        expect(there.place).not.toContain(tenant);
        expect(there.reasons.join('\n')).toContain(`${tenant} (split 2 ways on ${SHARD})`);
      } finally {
        await other.query(`drop schema if exists ${schema} cascade`);
      }
    },
  );

  it(
    'a router whose directory role may not read shardctl.splits still routes unsplit tenants, and refuses a split one naming the grant',
    { timeout: 60_000 },
    async () => {
      const plain = await newTenant();
      const tenant = await newTenant();
      await splitTenant(deps(), { tenant, ways: 2, actor: 'test' });
      const role = `sp_router_${randomBytes(4).toString('hex')}`;
      const dir = directoryPool();
      const db = (await dir.query('select current_database() as d')).rows[0].d;
      await dir.query(`create role ${role} login password 'pw'; grant connect on database ${db} to ${role}; grant usage on schema shardctl to ${role};
      grant select on shardctl.units, shardctl.shards, shardctl.generation to ${role}`);
      const url = new URL(config.directory.dsn);
      url.username = role;
      url.password = 'pw';
      const router = await Router.create(config, { directoryDsn: url.toString(), listen: false });
      try {
        const write = (t: string, key: string) =>
          router.withTenant(t, grant, 'write', (tx) => tx.query(`insert into ${schema}.orders(tenant_id, order_key) values ($1, $2)`, [t, key]), {
            splitKey: key,
          });
        await write(plain, 'k1');
        const err = await write(tenant, 'k1').catch((e) => e);
        expect(err.type).toBe('PreconditionFailed');
        expect(err.message).toContain('grant select on shardctl.splits');
      } finally {
        await router.close();
        await dir.query(`drop owned by ${role}; drop role ${role}`);
      }
    },
  );

  it('a split is refused when a tenant table has no split column configured, naming it', async () => {
    const tenant = await newTenant();
    const cfg = { ...config, tenant: { ...config.tenant, splitColumns: { [`${schema}.orders`]: 'order_key' } } };
    const err = await splitTenant({ directory: directoryPool(), shardPool, config: cfg }, { tenant, ways: 2, actor: 'test' }).catch((e) => e);
    expect(err.type).toBe('PreconditionFailed');
    expect(err.message).toContain(`${schema}.lines has no split column`);
    expect(await getPlacement(directoryPool(), tenant)).toMatchObject({ state: 'active' });
  });
});
