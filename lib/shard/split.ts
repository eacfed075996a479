// A tenant split's side on its shard (docs/architecture.md, "Splitting a tenant"): the sub-units'
// fences (T:0 .. T:K-1 at the split's epoch, owned, with their ways, so the fence triggers name a
// row's sub-unit by stable_hash(split column) mod K), installed before the directory names them;
// then, once the directory has split, the tenant's own fence is disowned at that epoch, so a router
// still writing T at the old epoch is refused (SC421), refreshes, and retries on the sub-unit.
import type { Pool } from 'pg';
import { FENCE_LOCK_CLASS } from './schema';
import { inTransaction } from '../pg';
import { splitUnitName } from '../buckets/units';
import { disown } from './fence';

export interface SubUnitFence {
  unit: string;
  epoch: number;
  owned: boolean;
  frozen: boolean;
  ways: number | null;
}

/**
 * Installs the sub-units' first fences (owned, open, `ways`) at `epoch`; one already there exactly
 * so (a re-run) is kept. Any other fence of a sub-unit is reported in `conflicting`, and then
 * nothing is written.
 */
export async function installSubUnitFences(
  pool: Pool,
  tenant: string,
  ways: number,
  epoch: number,
): Promise<{ installed: string[]; present: string[]; conflicting: SubUnitFence[] }> {
  const units = Array.from({ length: ways }, (_, k) => splitUnitName(tenant, k));
  return inTransaction(pool, async (c) => {
    await c.query(`select set_config('lock_timeout', '10000ms', true)`);
    await c.query('select pg_advisory_xact_lock($1, k) from (select distinct hashtext(u) as k from unnest($2::text[]) as x(u) order by 1) s', [
      FENCE_LOCK_CLASS,
      units,
    ]);
    const have = await subUnitFences(c, units);
    const conflicting = have.filter((f) => !(f.epoch === epoch && f.owned && !f.frozen && f.ways === ways));
    if (conflicting.length) return { installed: [], present: [], conflicting };
    const ins = await c.query(
      `insert into shardctl.fence(unit, epoch, owned, frozen, split_ways, updated_at)
       select u, $2, true, false, $3, now() from unnest($1::text[]) as x(u)
       on conflict (unit) do nothing returning unit`,
      [units, epoch, ways],
    );
    const installed = new Set<string>(ins.rows.map((r) => r.unit));
    return { installed: units.filter((u) => installed.has(u)), present: units.filter((u) => !installed.has(u)), conflicting: [] };
  });
}

/** Best effort after a lost directory compare-and-set: removes the sub-unit fences this split installed (still first owners). */
export async function removeSubUnitFences(pool: Pool, tenant: string, ways: number, epoch: number): Promise<number> {
  const units = Array.from({ length: ways }, (_, k) => splitUnitName(tenant, k));
  return inTransaction(pool, async (c) => {
    await c.query('select pg_advisory_xact_lock($1, k) from (select distinct hashtext(u) as k from unnest($2::text[]) as x(u) order by 1) s', [
      FENCE_LOCK_CLASS,
      units,
    ]);
    const r = await c.query('delete from shardctl.fence where unit = any($1::text[]) and epoch = $2 and owned and not frozen and split_ways = $3', [
      units,
      epoch,
      ways,
    ]);
    return r.rowCount ?? 0;
  });
}

/** The tenant's own fence after its split: not owned, at the split's epoch (waits for its in-flight writers). */
export function disownSplitTenant(pool: Pool, tenant: string, epoch: number) {
  return disown(pool, tenant, epoch);
}

export async function subUnitFences(db: Pool | import('pg').PoolClient, units: string[]): Promise<SubUnitFence[]> {
  const r = await db.query('select unit, epoch, owned, frozen, split_ways from shardctl.fence where unit = any($1::text[]) order by unit', [units]);
  return r.rows.map((x) => ({
    unit: x.unit,
    epoch: Number(x.epoch),
    owned: x.owned,
    frozen: x.frozen,
    ways: x.split_ways === null ? null : Number(x.split_ways),
  }));
}
